#!/bin/sh
# Print the Debian archive this machine's apt is configured with, for debootstrap.
#
#   MIRROR=$(scripts/apt_mirror.sh) || exit 2
#
# Reads what apt reads: /etc/apt/sources.list and /etc/apt/sources.list.d/*.list
# (one-line "deb [options] URI suite components") and *.sources (deb822: Types:,
# URIs:, Suites: stanzas).  The first "deb" source whose suite is a plain Debian
# release name (bookworm, trixie, stable, ...; not -security or -updates, not a
# third-party suite) is the archive.  No host is named here: the repository must
# not depend on one mirror.  Exit 1, with a message, when there is none.
set -eu
APT_DIR=${APT_DIR:-/etc/apt}
RELEASES="buster bullseye bookworm trixie forky sid oldoldstable oldstable stable testing unstable"

is_release() {
    for r in $RELEASES; do [ "$1" = "$r" ] && return 0; done
    return 1
}

one_line_sources() {   # "URI SUITE" for each deb line
    for f in "$APT_DIR/sources.list" "$APT_DIR"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" { print $2, $3 }'
    done
}

deb822_sources() {     # "URI SUITE" for each URI x suite of each deb stanza
    for f in "$APT_DIR"/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && enabled != "no")
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print uris[i], suites[j]
                types = ""; enabled = ""; nu = 0; ns = 0
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            {
                key = tolower($1); sub(/:$/, "", key)
                if (key == "types") { $1 = ""; types = $0 " " }
                else if (key == "uris") { for (i = 2; i <= NF; i++) uris[++nu] = $i }
                else if (key == "suites") { for (i = 2; i <= NF; i++) suites[++ns] = $i }
                else if (key == "enabled") { enabled = tolower($2) }
            }
            END { flush() }
        ' "$f"
    done
}

{ one_line_sources; deb822_sources; } | while read -r uri suite; do
    if is_release "$suite"; then
        echo "${uri%/}"
        exit 0
    fi
done | head -n 1 | grep . && exit 0

echo "apt_mirror.sh: no Debian archive in $APT_DIR/sources.list or $APT_DIR/sources.list.d/" \
     "(a 'deb' source for a release such as bookworm); configure one, or set MIRROR" >&2
exit 1
