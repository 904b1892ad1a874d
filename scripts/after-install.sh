#!/bin/sh
# after-install.sh PREFIX DESTDIR: what `make install` does once the files
# are in place. Into a directory the dynamic loader searches (/usr/local/lib
# on Debian), as root: ldconfig, so that a program linked with -ltq finds
# libtq.so at once, as the convention there is. Into any other prefix: say
# how a program finds the library (it would otherwise fail to start with
# "libtq.so.N: cannot open shared object file"). A staged install (DESTDIR)
# is a package's business: nothing.
set -eu
prefix=$1
destdir=${2:-}
[ -n "$destdir" ] && exit 0
lib="$prefix/lib"
if ldconfig -v -N 2>/dev/null | grep -q "^$lib:"; then
    if [ "$(id -u)" = 0 ]; then
        ldconfig
    else
        echo "run 'sudo ldconfig' so that programs find $lib/libtq.so"
    fi
else
    echo "$lib is not where the loader looks for libraries: link with"
    echo "  -Wl,-rpath,$lib   (cc app.c \$(pkg-config --cflags --libs tq) -Wl,-rpath,$lib)"
    echo "or run the program with LD_LIBRARY_PATH=$lib"
fi
