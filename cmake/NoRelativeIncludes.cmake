# cmake -DDIRS="a;b" -P NoRelativeIncludes.cmake: fails, naming each file and line, when a
# source under DIRS includes a header by a relative path ("../x.h", "./x.h"). Such an
# include is found next to the including file, before any include root, so it would reach a
# layer the include roots hide (CMakeLists.txt, sparse3d_include_root).
set(found "")
foreach(dir IN LISTS DIRS)
  file(GLOB_RECURSE files "${dir}/*.h" "${dir}/*.cpp" "${dir}/*.cu" "${dir}/*.cuh")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\.?/")
    foreach(line IN LISTS lines)
      string(STRIP "${line}" line)
      list(APPEND found "${f}: ${line}")
    endforeach()
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "relative includes (they bypass the layers' include roots):\n  ${text}")
endif()
message(STATUS "no relative includes under ${DIRS}")
