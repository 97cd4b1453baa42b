# The layer rule: a file of src/<layer>/ includes only headers of its own layer, of the
# layers it links (directly or through them) and the public headers (sparse3d/...); the
# public headers include/sparse3d/*.h include only each other and the standard library.
#
# Input: SPARSE3D_SOURCE_DIR, SPARSE3D_LAYERS (the layers, bottom first) and, per layer,
# SPARSE3D_LAYER_DEPS_<layer> (the layers it links) and SPARSE3D_LAYER_OPAQUE_<layer> (TRUE:
# layers above see it only through the public headers). Two uses:
#  - include()d by CMakeLists.txt at configure time (the variables are set there);
#  - cmake -DSPARSE3D_LAYERS_FILE=<build>/sparse3d_layers.cmake -P CheckLayers.cmake, the
#    ctest test `layers`, which catches an include added after the last configure.
# Fails with one line per offending #include.

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.25)
  include("${SPARSE3D_LAYERS_FILE}")
endif()

function(_sparse3d_layer_closure layer out)
  set(seen "")
  set(todo ${SPARSE3D_LAYER_DEPS_${layer}})
  while(todo)
    list(POP_FRONT todo dep)
    # An opaque layer (engine) is reached through the public headers only: neither its own
    # headers nor those of the layers under it.
    if(NOT dep IN_LIST seen AND NOT SPARSE3D_LAYER_OPAQUE_${dep})
      list(APPEND seen ${dep})
      list(APPEND todo ${SPARSE3D_LAYER_DEPS_${dep}})
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(_sparse3d_check_layers)
  set(bad "")
  set(include_re "^[ \t]*#[ \t]*include[ \t]*\"([^\"/]+)/")
  foreach(layer IN LISTS SPARSE3D_LAYERS)
    _sparse3d_layer_closure(${layer} allowed)
    list(APPEND allowed ${layer} sparse3d)
    list(JOIN allowed " " allowed_text)
    file(GLOB_RECURSE files "${SPARSE3D_SOURCE_DIR}/src/${layer}/*")
    foreach(f IN LISTS files)
      file(STRINGS "${f}" lines REGEX "${include_re}")
      foreach(line IN LISTS lines)
        string(REGEX MATCH "${include_re}" _ "${line}")
        if(NOT CMAKE_MATCH_1 IN_LIST allowed)
          file(RELATIVE_PATH rel "${SPARSE3D_SOURCE_DIR}" "${f}")
          string(STRIP "${line}" line)
          list(APPEND bad "${rel}: ${line} (${layer} may include: ${allowed_text})")
        endif()
      endforeach()
    endforeach()
  endforeach()

  file(GLOB_RECURSE public "${SPARSE3D_SOURCE_DIR}/include/sparse3d/*")
  foreach(f IN LISTS public)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"sparse3d/[^\"/]+\"")
        file(RELATIVE_PATH rel "${SPARSE3D_SOURCE_DIR}" "${f}")
        string(STRIP "${line}" line)
        list(APPEND bad "${rel}: ${line} (a public header includes only sparse3d/*.h)")
      endif()
    endforeach()
  endforeach()

  if(bad)
    list(JOIN bad "\n  " msg)
    message(FATAL_ERROR "includes that break the layer order (CMakeLists.txt, sparse3d_layer):\n"
                        "  ${msg}")
  endif()
endfunction()

_sparse3d_check_layers()
