# Loaded by scripts/build_msgs.sh through -DCMAKE_PROJECT_INCLUDE, for venv builds only.
#
# The ros-* message wheels on PyPI were built inside a manylinux container, and their exported
# CMake targets still name that container's interpreter include folders (/opt/python/cp3XX-...).
# Those folders do not exist on this machine, so CMake's generate step stops on them. When the
# top-level CMakeLists.txt has been read completely, this drops such entries from every imported
# target; the Python and numpy headers actually used are found through this venv's Python3.
function(oxygen_drop_manylinux_includes)
  get_directory_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" IMPORTED_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(dirs "${target}" INTERFACE_INCLUDE_DIRECTORIES)
    if(dirs)
      list(FILTER dirs EXCLUDE REGEX "^/opt/python/")
      set_target_properties("${target}" PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
    endif()
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL oxygen_drop_manylinux_includes)
