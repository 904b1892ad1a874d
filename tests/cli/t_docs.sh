# The docs' examples are run, so the docs cannot drift from the program
# (SQLite's and Python's doctests). The convention, for whoever writes a page:
#
# - The pages are README.md and docs/*.md. A fenced block is run when its
#   info string says so:
#     ```sh             run by bash -e -o pipefail; must exit 0
#     ```sh exit=N      must exit N (a page showing a command that fails)
#     ```sh sqlite      run only on SQLite (```sh postgres: only on PostgreSQL;
#                       the markers combine: ```sh sqlite exit=1)
#     ```sql sqlite     fed to `sqlite3 -bail` on the page's store
#     ```sql postgres   fed to `psql -v ON_ERROR_STOP=1` on the page's store
#   Every other block is not run: ```console for commands that run until
#   stopped or need what a test cannot have (tq serve, a worker without
#   --drain, make demo / make test / make bench, an install, roles on a
#   server), ```text for output, ```c, ```cmake, and a ```sql without an
#   engine.
# - Blocks run one at a time, in order, page by page. Each page gets a
#   fresh directory (the blocks' working directory: files a block makes,
#   say a handler script written with a heredoc, are there for the next)
#   and a fresh store that `tq init` has made, as after the README's first
#   steps: on SQLite ./tq.db (TQ_DB=tq.db), on PostgreSQL a database of its
#   own with the default schema tq (TQ_DB is its URL, which psql takes too).
#   Blocks share the directory and the store, not shell variables.
# - `tq` on the PATH is the tq under test ($TQ). Each block gets 20 s: a
#   worker in an example uses --drain (and no delayed job it would wait
#   for), nothing sleeps more than a second or two, nothing uses the
#   network.
#
# A failing block fails the test, naming the page and the block's first
# line (TQ_DOCS_VERBOSE=1 prints what every block printed). Then the pages' relative links must resolve (files, and #anchors
# to headings), and every docs/*.md page must be linked from README.md and
# named in docs/tq.1.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

mkdir -p "$T/bin"
ln -s "$TQ" "$T/bin/tq"

DBS=()
if [ "$ENGINE" = postgres ]; then
    cleanup_hook() {
        local d
        for d in "${DBS[@]}"; do
            psql -X -q "$TQ_TEST_PG_URL" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true
        done
    }
fi

# A page's store: fresh, made by tq init. Sets STORE.
new_store() { # DIR N
    if [ "$ENGINE" = postgres ]; then
        local db="docs_$$_$2"
        DBS+=("$db")
        sql "CREATE DATABASE $db" >/dev/null
        STORE=$(sed "s|///postgres?|///$db?|" <<<"$TQ_TEST_PG_URL")
        [ "$STORE" != "$TQ_TEST_PG_URL" ] || fail "cannot name a database in $TQ_TEST_PG_URL"
    else
        STORE=tq.db
    fi
    (cd "$1" && "$TQ" --db "$STORE" init >/dev/null) || fail "tq init for $1"
}

# Splits PAGE into its blocks: $T/blocks/N.body, and one line per block in
# $T/blocks/list: N, kind (sh or sql), engine (any, sqlite or postgres),
# expected exit status, first line.
split_page() { # PAGE
    rm -rf "$T/blocks"
    mkdir -p "$T/blocks"
    local line in=0 n=0 kind engine want word first
    while IFS= read -r line || [ -n "$line" ]; do
        if [ "$in" = 0 ]; then
            [[ $line == '```'* ]] || continue
            read -r kind rest <<<"${line#\`\`\`}" || true
            if [ "$kind" = sh ] || { [ "$kind" = sql ] && [[ " ${rest:-} " == *" sqlite "* || " ${rest:-} " == *" postgres "* ]]; }; then
                n=$((n + 1))
                engine=any want=0 first=""
                for word in ${rest:-}; do
                    case $word in
                    sqlite | postgres) engine=$word ;;
                    exit=*) want=${word#exit=} ;;
                    *) fail "$1: unknown marker '$word' in '$line'" ;;
                    esac
                done
                : >"$T/blocks/$n.body"
                in=1
            else
                in=2
            fi
        elif [[ $line == '```'* ]]; then
            [ "$in" = 1 ] && printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$kind" "$engine" "$want" "$first" >>"$T/blocks/list"
            in=0
        elif [ "$in" = 1 ]; then
            printf '%s\n' "$line" >>"$T/blocks/$n.body"
            [ -n "$first" ] || first=$line
        fi
    done <"$1"
    [ "$in" = 0 ] || fail "$1: a fenced block is not closed"
    touch "$T/blocks/list"
}

RAN=0 SKIPPED=0 FAILED=0 npage=0
for page in "$SRC/README.md" "$SRC"/docs/*.md; do
    rel=${page#"$SRC"/}
    split_page "$page"
    [ -s "$T/blocks/list" ] || continue
    npage=$((npage + 1))
    dir="$T/page$npage"
    mkdir -p "$dir"
    new_store "$dir" "$npage"
    while IFS=$'\t' read -r n kind engine want first; do
        if [ "$engine" != any ] && [ "$engine" != "$ENGINE" ]; then
            SKIPPED=$((SKIPPED + 1))
            continue
        fi
        case $kind in
        sh) cmd=(bash -e -o pipefail "$T/blocks/$n.body") ;;
        sql)
            if [ "$ENGINE" = postgres ]; then
                cmd=(psql -X -q -v ON_ERROR_STOP=1 "$STORE" -f "$T/blocks/$n.body")
            else
                cmd=(sqlite3 -bail "$STORE" ".read $T/blocks/$n.body")
            fi
            ;;
        esac
        set +e
        (cd "$dir" && PATH="$T/bin:$PATH" TQ_DB="$STORE" timeout -k 2 20 "${cmd[@]}") \
            </dev/null >"$T/out" 2>"$T/err"
        rc=$?
        set -e
        RAN=$((RAN + 1))
        if [ -n "${TQ_DOCS_VERBOSE:-}" ]; then # what each block printed, to read
            echo "==== $rel, block $n ($first): exit $rc"
            cat "$T/out" "$T/err"
        fi
        if [ "$rc" != "$want" ]; then
            FAILED=$((FAILED + 1))
            echo "FAIL: $rel, block $n ($first): exited $rc, expected $want" >&2
            [ "$rc" != 124 ] || echo "  (timed out after 20 s)" >&2
            tail -5 "$T/out" | sed 's/^/  stdout: /' >&2
            tail -10 "$T/err" | sed 's/^/  stderr: /' >&2
        fi
    done <"$T/blocks/list"
done
[ "$FAILED" = 0 ] || fail "$FAILED of $RAN example blocks failed (see above)"
[ "$RAN" -gt 20 ] || fail "only $RAN example blocks ran"

# ---- links -----------------------------------------------------------------------
# A heading's anchor as GitHub makes it: lower case, spaces to -, the rest
# of the punctuation dropped.
anchors() { # PAGE
    grep -E '^#+ ' "$1" | sed -E 's/^#+ //' | tr 'A-Z' 'a-z' |
        sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}
for page in "$SRC/README.md" "$SRC"/docs/*.md; do
    rel=${page#"$SRC"/}
    base=$(dirname "$page")
    # Every ](target) outside code blocks and code spans.
    awk '/^```/ { code = !code; next } !code' "$page" | sed 's/`[^`]*`//g' |
        { grep -oE '\]\([^)]+\)' || true; } | sed -E 's/^\]\(//; s/\)$//' | sort -u >"$T/links"
    while read -r link; do
        case $link in http://* | https://* | mailto:*) continue ;; esac
        file=${link%%#*}
        anchor=""
        [[ $link == *'#'* ]] && anchor=${link#*#}
        target=$page
        if [ -n "$file" ]; then
            target="$base/$file"
            [ -e "$target" ] || fail "$rel links to $link: no such file"
        fi
        if [ -n "$anchor" ]; then
            anchors "$target" >"$T/anchors"
            grep -qxF -- "$anchor" "$T/anchors" || fail "$rel links to $link: no such heading"
        fi
    done <"$T/links"
done
for page in "$SRC"/docs/*.md; do
    name=docs/$(basename "$page")
    grep -qF "]($name" "$SRC/README.md" || fail "README.md does not link to $name"
    grep -qF "$name" "$SRC/docs/tq.1" || fail "docs/tq.1 does not name $name"
done

echo "ok: $RAN example blocks run ($SKIPPED for the other engine only), from $npage pages"
