"""results.json of gpu_kernels.py as a markdown table: python3 report.py RESULTS.json"""
import json
import sys

rows = json.load(open(sys.argv[1]))
print("| job | what | against | dtype | T | shape | max abs diff | max abs ref | ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    shape = r.get("shapes") or "x".join(map(str, r["shape"]))
    print(f"| {r.get('job', r['part'] + '-' + r['prec'])} | {r['what']} | {r['form']} | {r['dtype']} | {r['T']} | {shape} | "
          f"{r['max_abs_diff']:.2e} | {r['max_ref']:.3g} | {r['rel']:.2e}{'' if r['finite'] else ' NON-FINITE'} |")
