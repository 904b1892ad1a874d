# The first steps of the README: `make demo` shows its result, not the
# build's steps, and ends by saying where tq is; `make install` (PREFIX,
# DESTDIR) puts the tool, the library, the header and the man page where
# they belong. Run against this test's own build tree.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(dirname "$TQ")

make -C "$SRC" --no-print-directory install BUILD="$BUILD" PREFIX=/opt/tq-test \
    DESTDIR="$T/stage" >"$T/install.out" 2>&1 || fail "make install: $(cat "$T/install.out")"
for f in bin/tq include/tq.h share/man/man1/tq.1 lib/libtq.a; do
    [ -f "$T/stage/opt/tq-test/$f" ] || fail "make install did not install $f: $(cat "$T/install.out")"
done
"$T/stage/opt/tq-test/bin/tq" --version | grep -q '^tq ' || fail "the installed tq does not run"
grep -q "Entering directory" "$T/install.out" && fail "make install shows make's steps"

make -C "$SRC" --no-print-directory demo BUILD="$BUILD" >"$T/demo.out" 2>&1 ||
    fail "make demo: $(cat "$T/demo.out")"
grep -q "Entering directory" "$T/demo.out" && fail "make demo shows make's steps: $(cat "$T/demo.out")"
grep -q "done 20000  lost 0  duplicates 0" "$T/demo.out" || fail "no result: $(cat "$T/demo.out")"
grep -qF "tq is built as $BUILD/tq; 'make install' puts it in /usr/local/bin" "$T/demo.out" ||
    fail "make demo does not say where tq is: $(cat "$T/demo.out")"
grep -qF "make install" "$SRC/README.md" || fail "the README does not say how to install"
echo ok
