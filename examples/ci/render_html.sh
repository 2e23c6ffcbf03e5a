#!/usr/bin/env bash
# Render a `bnconf check --html` page in headless Chromium, offline: a PNG screenshot, and a
# failure when the browser logs a console message (a script error) or the rendered DOM lacks
# the page's plots. Used by conformance/tests/reports.rs (html_renders_in_chromium) and .ci/run.
#
#   bash examples/ci/render_html.sh REPORT.html OUT.png        # CHROMIUM=chromium by default
#
# Debian: apt-get install -y chromium. Every network lookup is refused (--host-resolver-rules),
# so a page that needed the network would render without it.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 REPORT.html OUT.png" >&2
    exit 2
fi
html=$(realpath "$1")
png=$2
chromium=${CHROMIUM:-chromium}
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking
       --disable-component-update --disable-sync --no-first-run
       --host-resolver-rules="MAP * ~NOTFOUND" --user-data-dir="$profile")
rm -f "$png"
"$chromium" "${flags[@]}" --enable-logging=stderr --v=0 --window-size=1400,2000 \
    --screenshot="$png" "file://$html" >"$profile/out.txt" 2>"$profile/log.txt" || {
    cat "$profile/log.txt" >&2
    echo "render_html.sh: chromium failed" >&2
    exit 1
}
if [ ! -s "$png" ]; then
    cat "$profile/log.txt" >&2
    echo "render_html.sh: no screenshot written" >&2
    exit 1
fi
if grep -F ':CONSOLE' "$profile/log.txt" >&2; then
    echo "render_html.sh: the page logged to the console (above)" >&2
    exit 1
fi
"$chromium" "${flags[@]}" --dump-dom "file://$html" >"$profile/dom.html" 2>/dev/null
for want in '<svg' '<polyline' 'Ratios per op, class and dtype'; do
    if ! grep -qF "$want" "$profile/dom.html"; then
        echo "render_html.sh: the rendered page has no $want" >&2
        exit 1
    fi
done
echo "render_html.sh: $png ($(wc -c <"$png") bytes), no console message"
