# A random PEFT adapter (bf16; rank 64 unless given) for every q/k/v/o/gate/up/down of a checkpoint,
# read from its safetensors headers (for bench/merge_bench.sh and bench/serve_lora.py).
# usage: make_random_adapter.py BASE_DIR OUT_DIR [RANK [SEED]]
import glob, json, os, struct, sys
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import gemma_ref
base, out = sys.argv[1], sys.argv[2]
rank = int(sys.argv[3]) if len(sys.argv) > 3 else 64
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
shapes = {}
for f in glob.glob(os.path.join(base, "*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
    for k, v in h.items():
        if k != "__metadata__":
            shapes[k] = v["shape"]
rng = np.random.default_rng(seed)
t = {}
for name, shp in sorted(shapes.items()):
    mod = name[:-7] if name.endswith(".weight") else None
    if not mod or not any(mod.endswith(s) for s in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")):
        continue
    o, i = shp
    t[f"base_model.model.{mod}.lora_A.weight"] = (rng.uniform(-0.01, 0.01, (rank, i)).astype(np.float32), "BF16")
    t[f"base_model.model.{mod}.lora_B.weight"] = (rng.normal(0, 0.01, (o, rank)).astype(np.float32), "BF16")
os.makedirs(out, exist_ok=True)
gemma_ref.write_safetensors(os.path.join(out, "adapter_model.safetensors"), t, {"format": "pt"})
json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "lora_dropout": 0.0, "bias": "none"}, open(os.path.join(out, "adapter_config.json"), "w"))
print(len(t) // 2, "modules")
