# The layer order is held by the compiler (CMakeLists.txt, sparse3d_include_root): a target
# sees only the folders of the layers it may include. These ctest tests keep it so. Each
# probe is a one-line translation unit compiled with the include root and usage requirements
# of a real target, outside `all`; its test builds it:
#  - a forbidden include must fail with the compiler's "No such file" for that header (a
#    failure for any other reason fails the test);
#  - an allowed include must compile, so that a probe which fails for an unrelated reason
#    (a broken root, a missing library header) is noticed.
# The probes share the build tree's ninja: RESOURCE_LOCK runs them one at a time.

set(_probe_dir ${CMAKE_BINARY_DIR}/layer_probes)
file(MAKE_DIRECTORY ${_probe_dir})

# sparse3d_layer_probe(NAME TARGET HEADER ALLOWED|FORBIDDEN)
function(sparse3d_layer_probe name target header verdict)
  set(src ${_probe_dir}/${name}.cpp)
  file(CONFIGURE OUTPUT ${src} CONTENT "#include \"${header}\"\nint sparse3d_layer_probe_${name}() { return 0; }\n")
  add_library(layer_probe_${name} OBJECT EXCLUDE_FROM_ALL ${src})
  get_target_property(root ${target} SPARSE3D_INCLUDE_ROOT)
  target_include_directories(layer_probe_${name} PRIVATE ${root})
  # The usage requirements (CUDA, nlohmann-json, compile definitions) of what TARGET links.
  get_target_property(links ${target} LINK_LIBRARIES)
  target_link_libraries(layer_probe_${name} PRIVATE ${links})
  add_test(NAME layer_probe_${name}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target layer_probe_${name})
  set_tests_properties(layer_probe_${name} PROPERTIES RESOURCE_LOCK build_tree TIMEOUT 300
                       LABELS layers)
  if(verdict STREQUAL "FORBIDDEN")
    # Passes only on the compiler's own verdict about this header.
    string(REPLACE "." "\\." header_re "${header}")
    set_tests_properties(layer_probe_${name} PROPERTIES
                         PASS_REGULAR_EXPRESSION "${header_re}: No such file or directory")
  endif()
endfunction()

# Forbidden: a lower layer including a higher one, a layer under the engine including the
# engine's public header, a client reaching past the public API, the Python module reaching
# into the library.
sparse3d_layer_probe(model_includes_sampler sparse3d_model "sampler/sampler.h" FORBIDDEN)
sparse3d_layer_probe(core_includes_io sparse3d_core "io/json.h" FORBIDDEN)
sparse3d_layer_probe(sampler_includes_engine_h sparse3d_sampler "sparse3d/engine.h" FORBIDDEN)
sparse3d_layer_probe(kernels_includes_engine_h sparse3d_kernels "sparse3d/engine.h" FORBIDDEN)
sparse3d_layer_probe(sampler_includes_engine_impl sparse3d_sampler "engine/engine_impl.h" FORBIDDEN)
sparse3d_layer_probe(ops_includes_model sparse3d_ops "model/trunk/request.h" FORBIDDEN)
sparse3d_layer_probe(kernels_includes_ops sparse3d_kernels "ops/op.h" FORBIDDEN)
sparse3d_layer_probe(parallel_includes_model sparse3d_parallel "model/trunk/request.h" FORBIDDEN)
sparse3d_layer_probe(kernels_includes_parallel sparse3d_kernels "parallel/group.h" FORBIDDEN)
sparse3d_layer_probe(bench_includes_model sparse3d_bench "model/trunk/transformer.h" FORBIDDEN)
sparse3d_layer_probe(apps_includes_model sparse3d_cli "model/checkpoint.h" FORBIDDEN)
sparse3d_layer_probe(apps_includes_contract sparse3d_cli "contract/fingerprint.h" FORBIDDEN)
# The bench's op table is its own (PRIVATE_DEPS): the command reaches neither it nor what is
# under it (kernels, gemm, attention) through the bench.
sparse3d_layer_probe(apps_includes_ops sparse3d_cli "ops/op.h" FORBIDDEN)
sparse3d_layer_probe(apps_includes_kernels sparse3d_cli "kernels/elementwise.h" FORBIDDEN)
sparse3d_layer_probe(apps_includes_gemm sparse3d_cli "gemm/linear.h" FORBIDDEN)
if(TARGET sparse3d_native)
  sparse3d_layer_probe(python_includes_core sparse3d_native "core/tensor.h" FORBIDDEN)
endif()

# Allowed: the same targets including what they may.
sparse3d_layer_probe(model_includes_gemm sparse3d_model "gemm/linear.h" ALLOWED)
sparse3d_layer_probe(model_includes_ops sparse3d_model "ops/modulated_layernorm.h" ALLOWED)
sparse3d_layer_probe(ops_includes_gemm sparse3d_ops "gemm/linear.h" ALLOWED)
sparse3d_layer_probe(model_includes_parallel sparse3d_model "parallel/group.h" ALLOWED)
sparse3d_layer_probe(sampler_includes_flags_h sparse3d_sampler "sparse3d/flags.h" ALLOWED)
sparse3d_layer_probe(sampler_includes_model sparse3d_sampler "model/trunk/transformer.h" ALLOWED)
sparse3d_layer_probe(bench_includes_engine_h sparse3d_bench "sparse3d/engine.h" ALLOWED)
sparse3d_layer_probe(apps_includes_bench sparse3d_cli "bench/report.h" ALLOWED)
sparse3d_layer_probe(apps_includes_kernel_bench sparse3d_cli "bench/kernel_bandwidth.h" ALLOWED)
sparse3d_layer_probe(bench_includes_ops sparse3d_bench "ops/bandwidth.h" ALLOWED)

# A relative include ("../sampler/sampler.h") is found beside the including file, before any
# include root: src/ and include/ must have none. The second test runs the same scan over a
# folder holding one, and must fail (so the first can).
add_test(NAME layer_no_relative_includes
         COMMAND ${CMAKE_COMMAND} "-DDIRS=${PROJECT_SOURCE_DIR}/src;${PROJECT_SOURCE_DIR}/include"
                 -P ${PROJECT_SOURCE_DIR}/cmake/NoRelativeIncludes.cmake)
file(CONFIGURE OUTPUT ${_probe_dir}/relative/a/b.cpp CONTENT "#include \"../model/x.h\"\n")
add_test(NAME layer_no_relative_includes_finds_one
         COMMAND ${CMAKE_COMMAND} "-DDIRS=${_probe_dir}/relative"
                 -P ${PROJECT_SOURCE_DIR}/cmake/NoRelativeIncludes.cmake)
set_tests_properties(layer_no_relative_includes layer_no_relative_includes_finds_one
                     PROPERTIES LABELS layers)
set_tests_properties(layer_no_relative_includes_finds_one PROPERTIES
                     PASS_REGULAR_EXPRESSION "relative includes.*b\\.cpp: #include \"\\.\\./model/x\\.h\"")
