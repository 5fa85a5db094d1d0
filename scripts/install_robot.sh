#!/usr/bin/env bash
# Install oxygen on a robot with ROS 2 from apt, in one command, and print how to launch it.
#
#   scripts/install_robot.sh --distro jazzy --accel cuda13 [--venv ~/oxygen-venv]
#       [--workspace ~/oxygen_ws] [--params aloha.yaml] [--no-rosdep]
#
# 1. sources /opt/ros/<distro>/setup.bash (ROS_PREFIX overrides /opt/ros/<distro>);
# 2. creates the venv over the system Python with --system-site-packages (apt's python3-*
#    packages; rclpy and the ROS packages come through setup.bash's PYTHONPATH; PEP 668
#    forbids pip into the system Python), and installs into it the pinned wheels for the accelerator (scripts/robot_requirements.py: cpu, cuda12,
#    cuda13), never requirements.txt (its PyPI ros-* wheels would shadow the robot's ROS);
# 3. installs the system dependencies of package.xml with rosdep (unless --no-rosdep);
# 4. builds this checkout with colcon into the workspace (build/ log/ and one merged
#    install/ there, so the checkout can live anywhere) with the venv's Python;
# 5. checks that the installed node imports, and prints the lines that launch it.
# The venv must not lie inside this checkout: CMake refuses an install whose include paths
# point into the source tree.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
distro="" accel="" venv="$HOME/oxygen-venv" ws="$HOME/oxygen_ws" params="aloha.yaml" rosdep=1

die() { echo "install_robot.sh: $*" >&2; exit 2; }

while (($#)); do
  case $1 in
    --distro) distro=${2:-}; shift 2 ;;
    --accel) accel=${2:-}; shift 2 ;;
    --venv) venv=${2:-}; shift 2 ;;
    --workspace) ws=${2:-}; shift 2 ;;
    --params) params=${2:-}; shift 2 ;;
    --no-rosdep) rosdep=0; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
done
[[ -n $distro ]] || die "--distro is required (jazzy or kilted)"
[[ -n $accel ]] || die "--accel is required (cpu, cuda12 or cuda13)"
prefix=${ROS_PREFIX:-/opt/ros/$distro}
[[ -f $prefix/setup.bash ]] || die "no ROS 2 $distro at $prefix (no setup.bash there)"
[[ -f $root/config/$params ]] || die "no params file config/$params in $root"
venv=$(realpath -m "$venv") ws=$(realpath -m "$ws")
[[ $venv/ != "$root"/* ]] || die "the venv $venv must not lie inside the checkout $root"
[[ $ws/ != "$root"/* ]] || die "the workspace $ws must not lie inside the checkout $root"
requirements=$(python3 "$root/scripts/robot_requirements.py" "$accel" 2>&1) ||
  die "${requirements#robot_requirements.py: }"

set +u  # ROS's setup scripts read unset variables
# shellcheck disable=SC1091
source "$prefix/setup.bash"
set -u

echo "== venv $venv (system site packages: rclpy from $prefix)"
[[ -x $venv/bin/python ]] || python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --progress-bar off -r /dev/stdin <<<"$requirements"

if ((rosdep)); then
  echo "== rosdep (package.xml's system dependencies)"
  rosdep install --from-paths "$root" --ignore-src -y --rosdistro "$distro"
fi

echo "== colcon build into $ws"
mkdir -p "$ws"
# shellcheck disable=SC1091
source "$venv/bin/activate"
(cd "$ws" && colcon build --base-paths "$root" --packages-select oxygen_ros --merge-install \
  --cmake-args -DPython3_EXECUTABLE="$venv/bin/python" -DBUILD_TESTING=OFF \
  -DCMAKE_PROJECT_INCLUDE="$root/cmake/fix_manylinux_includes.cmake")

set +u
# shellcheck disable=SC1091
source "$ws/install/setup.bash"
set -u
echo "== check"
"$venv/bin/python" -c "import jax, rclpy, oxygen_ros.msg; print('jax', jax.__version__, jax.devices())"
"$ws/install/lib/oxygen_ros/oxygen_node" --help >/dev/null

cat <<EOF
== installed. In each new shell:
source $prefix/setup.bash && source $venv/bin/activate && source $ws/install/setup.bash
ros2 launch oxygen_ros oxygen.launch.py params_file:=$ws/install/share/oxygen_ros/config/$params
EOF
