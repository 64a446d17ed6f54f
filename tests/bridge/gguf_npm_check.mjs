// Parses a GGUF file with @huggingface/gguf (Hugging Face's JavaScript GGUF parser, an
// implementation independent of gemmakit's) and prints what it read as one JSON object:
//   { version, tensor_count, kv_count, littleEndian, tensorDataOffset,
//     metadata: { key: { type, subType?, value } },   // GGUFValueType codes; u64/i64 as strings
//     tensors: [ { name, n_dims, shape: [..], dtype, offset } ] }
// usage: node gguf_npm_check.mjs NPM_DIR FILE.gguf
import { createRequire } from "node:module";
import path from "node:path";

const [npmDir, file] = process.argv.slice(2);
if (!npmDir || !file) {
  console.error("usage: node gguf_npm_check.mjs NPM_DIR FILE.gguf");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(npmDir), "node_modules", "noop.js"));
const { gguf } = require("@huggingface/gguf");

const out = await gguf(path.resolve(file), { allowLocalFile: true, typedMetadata: true });
const big = (v) => (typeof v === "bigint" ? v.toString() : v);
const metadata = {};
for (const [key, entry] of Object.entries(out.typedMetadata)) {
  if (key === "version" || key === "tensor_count" || key === "kv_count") continue;
  const value = Array.isArray(entry.value) ? entry.value.map(big) : big(entry.value);
  metadata[key] = entry.subType === undefined ? { type: entry.type, value } : { type: entry.type, subType: entry.subType, value };
}
const result = {
  version: out.metadata.version,
  tensor_count: big(out.metadata.tensor_count),
  kv_count: big(out.metadata.kv_count),
  littleEndian: out.littleEndian,
  tensorDataOffset: big(out.tensorDataOffset),
  metadata,
  tensors: out.tensorInfos.map((t) => ({ name: t.name, n_dims: t.n_dims, shape: t.shape.map(big), dtype: t.dtype, offset: big(t.offset) })),
};
process.stdout.write(JSON.stringify(result));
