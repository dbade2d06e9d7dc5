#!/usr/bin/env bash
# Package test (CTest: consumer_find_package). Installs an already built cowstate build tree into
# a scratch prefix, then configures, builds and runs tests/consumer against it.
#
# usage: run.sh CONSUMER_SRC MAIN_BUILD_DIR CMAKE [GENERATOR [CXX [BUILD_TYPE [CXX_FLAGS
#               [EXE_LINKER_FLAGS]]]]]
# The main build tree is only read (cmake --install), never reconfigured.
# With COWSTATE_CONSUMER_CHECK_HEADERS=1 in the environment (CTest test
# installed_headers_self_contained) it also compiles every installed header on its own.
# COWSTATE_CONSUMER_RUN names the program to run (default cowstate_consumer; the CTest test
# examples_against_install builds examples/ and runs keyed_backend).
set -euo pipefail

if (($# < 3)); then
  echo "usage: $0 CONSUMER_SRC MAIN_BUILD_DIR CMAKE [GENERATOR CXX BUILD_TYPE CXX_FLAGS LDFLAGS]" >&2
  exit 2
fi
src=$1
main_build=$2
cmake=$3
generator=${4:-Ninja}
cxx=${5:-c++}
build_type=${6:-}
cxx_flags=${7:-}
exe_linker_flags=${8:-}

check_headers=${COWSTATE_CONSUMER_CHECK_HEADERS:-0}
run=${COWSTATE_CONSUMER_RUN:-cowstate_consumer}
case "$check_headers" in
  0) work="$main_build/tests/$(basename "$src")-work" header_opt=OFF ;;
  1) work="$main_build/tests/consumer-headers-work" header_opt=ON ;;
  *)
    echo "COWSTATE_CONSUMER_CHECK_HEADERS must be 0 or 1" >&2
    exit 2
    ;;
esac
prefix="$work/prefix"
build="$work/build"
rm -rf "$work"
mkdir -p "$work"

echo "== install $main_build -> $prefix"
"$cmake" --install "$main_build" --prefix "$prefix"

echo "== configure consumer"
"$cmake" -S "$src" -B "$build" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_CXX_FLAGS="$cxx_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$exe_linker_flags" \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
  -DCOWSTATE_CONSUMER_CHECK_HEADERS="$header_opt"

# The package must come from the scratch prefix, not from some other installed copy.
found=$(sed -n 's/^cowstate_DIR:PATH=//p' "$build/CMakeCache.txt")
case "$found" in
  "$prefix"/*) echo "== found cowstate in $found" ;;
  *)
    echo "run.sh: cowstate_DIR is '$found', expected under $prefix" >&2
    exit 1
    ;;
esac

echo "== build consumer"
"$cmake" --build "$build"

echo "== run $run"
"$build/$run" "$work/run"
