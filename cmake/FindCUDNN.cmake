# FindCUDNN: the cuDNN library, for sparse3d's own build and for its installed package
# (sparse3dConfig.cmake finds it with find_dependency(CUDNN)).
#
# Sets CUDNN_FOUND, CUDNN_LIBRARY (cache), CUDNN_INCLUDE_DIR (cache; may be NOTFOUND where
# only the library is installed) and defines the imported target CUDNN::cudnn: the library
# only. cudnn.h is compiled into one translation unit of sparse3d (attention_cudnn.cpp, which
# adds CUDNN_INCLUDE_DIR itself) and into no header a user of the package includes.
#
# Hints: CUDNN_LIBRARY / CUDNN_INCLUDE_DIR set by hand (e.g. the cuDNN of a pip wheel), the
# CUDA toolkit's folders, /usr/local.
if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include)
mark_as_advanced(CUDNN_LIBRARY CUDNN_INCLUDE_DIR)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}")
endif()
