# The first steps of the README: `make demo` shows its result, not the
# build's steps, and ends by saying where tq is; `make install` (PREFIX,
# DESTDIR) puts the tool, the library, the header, the man page, tq.pc and
# the CMake package where they belong, and a program builds against them.
# Run against this test's own build tree.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(dirname "$TQ")

make -C "$SRC" --no-print-directory install BUILD="$BUILD" PREFIX=/opt/tq-test \
    DESTDIR="$T/stage" >"$T/install.out" 2>&1 || fail "make install: $(cat "$T/install.out")"
for f in bin/tq include/tq.h share/man/man1/tq.1 lib/libtq.a lib/libtq.so.8 \
    lib/pkgconfig/tq.pc lib/cmake/tq/tqConfig.cmake; do
    [ -f "$T/stage/opt/tq-test/$f" ] || fail "make install did not install $f: $(cat "$T/install.out")"
done
"$T/stage/opt/tq-test/bin/tq" --version | grep -q '^tq ' || fail "the installed tq does not run"
grep -q "Entering directory" "$T/install.out" && fail "make install shows make's steps"

# The library installed into a prefix, and examples/embed.c built against it
# as any C user would: with pkg-config, and with a CMake project.
cmake --install "$BUILD" --prefix "$T/prefix" >"$T/prefix.out" 2>&1 ||
    fail "cmake --install: $(cat "$T/prefix.out")"
cflags=""
# (A sanitized build's library needs its runtime in the program too.)
ldd "$T/prefix/lib/libtq.so" >"$T/ldd"
grep -q libasan "$T/ldd" && cflags="-fsanitize=address,undefined"
export PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
expect_eq "$(pkg-config --modversion tq)" "$("$TQ" --version | cut -d' ' -f2)" "tq.pc's version"
# shellcheck disable=SC2046
cc $cflags -o "$T/embed-pc" "$SRC/examples/embed.c" $(pkg-config --cflags --libs tq) \
    -Wl,-rpath,"$T/prefix/lib" 2>"$T/cc.err" || fail "cc with pkg-config: $(cat "$T/cc.err")"
"$T/embed-pc" "$T/pc.db" >"$T/out" || fail "embed (pkg-config): $(cat "$T/out")"
grep -q "handled 4 jobs: 4 done, 1 failed attempts" "$T/out" || fail "embed (pkg-config): $(cat "$T/out")"
# docs/library.md's other way: no rpath, the library's place given when the
# program runs (without it, the program cannot start).
# shellcheck disable=SC2046
cc $cflags -o "$T/embed-ld" "$SRC/examples/embed.c" $(pkg-config --cflags --libs tq) \
    2>"$T/cc.err" || fail "cc with pkg-config, no rpath: $(cat "$T/cc.err")"
if ! ldconfig -p | grep -q 'libtq\.so\.6 '; then # (not when one is installed system-wide)
    "$T/embed-ld" "$T/ld0.db" >"$T/out" 2>&1 && fail "embed without rpath or LD_LIBRARY_PATH started"
    grep -q "libtq.so.8" "$T/out" || fail "embed without rpath: $(cat "$T/out")"
fi
LD_LIBRARY_PATH="$T/prefix/lib" "$T/embed-ld" "$T/ld.db" >"$T/out" ||
    fail "embed with LD_LIBRARY_PATH: $(cat "$T/out")"
grep -q "handled 4 jobs" "$T/out" || fail "embed with LD_LIBRARY_PATH: $(cat "$T/out")"
# make install into a prefix the loader does not search says how a program
# finds the library (issue: a pkg-config build that cannot start).
make -C "$SRC" --no-print-directory install BUILD="$BUILD" PREFIX="$T/own" \
    >"$T/own.out" 2>&1 || fail "make install PREFIX: $(cat "$T/own.out")"
grep -qF -- "-Wl,-rpath,$T/own/lib" "$T/own.out" || fail "make install PREFIX=DIR does not say how to find the library: $(cat "$T/own.out")"
grep -qF "LD_LIBRARY_PATH=$T/own/lib" "$T/own.out" || fail "make install PREFIX=DIR: $(cat "$T/own.out")"
mkdir -p "$T/proj"
cat >"$T/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(embed C)
find_package(tq 0.6 REQUIRED)
add_executable(embed $SRC/examples/embed.c)
target_link_libraries(embed tq::tq)
CMAKE
(cmake -S "$T/proj" -B "$T/proj/build" -DCMAKE_PREFIX_PATH="$T/prefix" \
    -DCMAKE_C_FLAGS="$cflags" && cmake --build "$T/proj/build") >"$T/proj.out" 2>&1 ||
    fail "the CMake project: $(cat "$T/proj.out")"
"$T/proj/build/embed" "$T/cm.db" >"$T/out" || fail "embed (CMake): $(cat "$T/out")"
grep -q "handled 4 jobs: 4 done, 1 failed attempts" "$T/out" || fail "embed (CMake): $(cat "$T/out")"
ldd "$T/proj/build/embed" >"$T/ldd"
grep -qF "$T/prefix/lib/libtq.so.8" "$T/ldd" ||
    fail "embed (CMake) does not use the installed libtq.so.8: $(cat "$T/ldd")"

make -C "$SRC" --no-print-directory demo BUILD="$BUILD" >"$T/demo.out" 2>&1 ||
    fail "make demo: $(cat "$T/demo.out")"
grep -q "Entering directory" "$T/demo.out" && fail "make demo shows make's steps: $(cat "$T/demo.out")"
grep -q "done 20000  lost 0  duplicates 0" "$T/demo.out" || fail "no result: $(cat "$T/demo.out")"
grep -qF "tq is built as $BUILD/tq; 'make install' puts it in /usr/local/bin" "$T/demo.out" ||
    fail "make demo does not say where tq is: $(cat "$T/demo.out")"
grep -qF "make install" "$SRC/README.md" || fail "the README does not say how to install"
echo ok
