// libFuzzer target for the zarr metadata parser and chunk decoding (src/formats/orbax/zarr.h).
// Input: byte 0 picks zarr v2 (.zarray) or v3 (zarr.json); then the metadata text up to the
// first NUL byte; the bytes after it are the stored value of every chunk key. Small arrays
// that parse are read whole (zstd, shard indexes, crc32c, big-endian, edge chunks).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "formats/orbax/zarr.h"

using namespace gk::orbax;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int format = (data[0] & 1) ? 3 : 2;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  auto m = zarr::ParseMetadata(text, format);
  if (!m.ok() || nul == std::string_view::npos) return 0;
  // Bound the work: the whole array, one chunk and the number of chunks.
  uint64_t chunk_bytes = m->item_size, chunks = 1;
  const std::vector<int64_t>& c = m->sharded ? m->inner_chunk_shape : m->chunk_shape;
  for (int64_t d : c) chunk_bytes *= uint64_t(d);
  for (int64_t g : m->GridShape()) chunks *= uint64_t(g);
  if (m->item_size == 0 || m->nbytes() > (1u << 20) || chunk_bytes > (1u << 20) || chunks > 256) return 0;
  if (m->sharded) {
    uint64_t per_shard = 1;
    for (size_t i = 0; i < m->chunk_shape.size(); ++i) per_shard *= uint64_t(m->chunk_shape[i] / m->inner_chunk_shape[i]);
    if (per_shard > 4096) return 0;
  }
  StoredValue value;
  value.inline_bytes.assign(rest.substr(nul + 1));
  FileSet files;
  std::vector<uint8_t> out(m->nbytes() + 1, 0x5a);
  (void)zarr::ReadArray(*m, "p/", files, [&](const std::string&) { return &value; }, out.data());
  if (out.back() != 0x5a) std::abort();  // wrote past the array
  return 0;
}
