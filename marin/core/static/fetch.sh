#!/bin/sh
# How the front-end libraries under marin/core/static/ were fetched (run from the repository root; needs npm).
# They are shipped inside the package so `marin dashboard` and the report site work offline: no CDN anywhere.
#   uplot 1.6.32  (MIT)  charts of the dashboard: uPlot.iife.min.js, uPlot.min.css
#   katex 0.19.1  (MIT)  math on the report site and in run notes: katex.min.js, katex.min.css, auto-render.min.js,
#                        the woff2 fonts (every browser the lab supports reads woff2; the woff/ttf fallbacks are
#                        dropped from the stylesheet so it names only files that are here)
set -eu
UPLOT=1.6.32
KATEX=0.19.1
S=marin/core/static
tmp=$(mktemp -d)
(cd "$tmp" && npm pack --silent "uplot@$UPLOT" "katex@$KATEX" >/dev/null && mkdir u k \
  && tar xzf "uplot-$UPLOT.tgz" -C u && tar xzf "katex-$KATEX.tgz" -C k)
mkdir -p "$S/uplot" "$S/katex/fonts"
cp "$tmp/u/package/dist/uPlot.iife.min.js" "$tmp/u/package/dist/uPlot.min.css" "$tmp/u/package/LICENSE" "$S/uplot/"
cp "$tmp/k/package/dist/katex.min.js" "$tmp/k/package/dist/contrib/auto-render.min.js" "$tmp/k/package/LICENSE" "$S/katex/"
cp "$tmp/k/package/dist/fonts/"*.woff2 "$S/katex/fonts/"
sed -E 's/,url\(fonts\/[A-Za-z0-9_-]+\.woff\) format\("woff"\),url\(fonts\/[A-Za-z0-9_-]+\.ttf\) format\("truetype"\)//g' \
  "$tmp/k/package/dist/katex.min.css" > "$S/katex/katex.min.css"
rm -rf "$tmp"
