# oxygen_write_executable(PATH MODULE [FUNCTION]): a `ros2 run` entry that calls
# MODULE.FUNCTION() (default: main), as setup.py's console script of the same tool does.
#
# The shebang is the absolute path of the Python that CMake found (Python3_EXECUTABLE), as
# ament_python and setuptools write it: `#!/usr/bin/env python3` would pick whatever python3
# comes first on PATH, which lacks jax and the rest unless the robot's venv is activated.
# Kept in its own file so a test can configure it without building the messages.
function(oxygen_write_executable path module)
  set(entry main)
  if(ARGC GREATER 2)
    set(entry ${ARGV2})
  endif()
  if(NOT Python3_EXECUTABLE)
    message(FATAL_ERROR "oxygen_write_executable: find_package(Python3) first")
  endif()
  file(WRITE "${path}"
    "#!${Python3_EXECUTABLE}\nimport sys\n\nfrom ${module} import ${entry}\n\nsys.exit(${entry}())\n")
  # --symlink-install links the installed entry to this file: it must be executable itself.
  file(CHMOD "${path}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
    GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endfunction()
