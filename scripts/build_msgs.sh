#!/usr/bin/env bash
# Build msg/ with CMake (rosidl) against the ROS wheels in a virtual environment and install
# only the generated interfaces into it: the Python sources come from `pip install -e .`.
# Usage: scripts/build_msgs.sh VENV BUILD_DIR
set -euo pipefail

venv=$(cd "${1:?usage: build_msgs.sh VENV BUILD_DIR}" && pwd)
build=${2:?usage: build_msgs.sh VENV BUILD_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# A build folder configured for another checkout (a copied tree) cannot be reused.
if [[ -f $build/CMakeCache.txt ]] &&
  ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi

# cmake and ninja are the pinned wheels; ament and rosidl are found under the venv prefix only,
# never in a ROS installation this shell may have sourced.
export PATH="$venv/bin:$PATH" AMENT_PREFIX_PATH="$venv" CMAKE_PREFIX_PATH="$venv"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_INSTALL_PREFIX="$venv" \
  -DCMAKE_PROJECT_INCLUDE="$root/cmake/fix_manylinux_includes.cmake" \
  -DPython3_EXECUTABLE="$venv/bin/python" \
  -DBUILD_TESTING=OFF \
  -DOXYGEN_INSTALL_SOURCES=OFF
cmake --build "$build" --target install
