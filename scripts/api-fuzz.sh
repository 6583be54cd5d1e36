#!/usr/bin/env bash
# `make api-fuzz`: schemathesis against a live `subagents serve` on
# 127.0.0.1, from the served OpenAPI document. Fails on any 5xx and on any
# answer the document does not describe. The event stream (endless by design)
# is left out; gateway/tests/events.rs covers it. Usage: api-fuzz.sh SUBAGENTS_BIN [MAX_EXAMPLES]
set -euo pipefail
bin=$1
examples=${2:-100}
work=$(mktemp -d)
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export SUBAGENTS_GATEWAY_TOKEN=$token
"$bin" serve --data "$work/data" --listen 127.0.0.1:0 > "$work/serve.out" &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  grep -q '^serving ' "$work/serve.out" && break
  sleep 0.1
done
url=$(sed -n 's/^serving \(.*\)\/v1\/$/\1/p' "$work/serve.out")
echo "fuzzing $url"
curl -sf -H "Authorization: Bearer $token" "$url/v1/openapi.json" > "$work/openapi.json"
schemathesis run "$work/openapi.json" --url "$url" \
  --header "Authorization: Bearer $token" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --exclude-path /v1/events --request-timeout 10 \
  --max-examples "$examples" --report junit --report-dir "$work/report" || status=$?
if [ -d "$work/report" ]; then
  python3 - "$work/report" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
total = 0
for path in glob.glob(sys.argv[1] + "/*.xml"):
    for case in ET.parse(path).iter("testcase"):
        total += 1
print(f"operations in the report: {total}")
PY
fi
exit ${status:-0}
