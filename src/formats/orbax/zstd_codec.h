// zstd for OCDBT envelopes and zarr chunks. Frames written by riegeli (TensorStore) may lack
// the content-size field, so decoding never trusts it: output is bounded by the size the
// caller knows (a chunk) or a cap (a node body), and streamed input is pulled piecewise so a
// large out-of-line chunk is never held compressed in memory as a whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/orbax/file_set.h"
#include "util/result.h"

namespace gk::orbax {

// Decodes a whole in-memory input (one or more frames) of at most `cap` decoded bytes.
Result<std::string> ZstdDecompressBounded(std::string_view src, uint64_t cap);

// Decodes bytes [offset, offset + length) of a stored value, which must decode to exactly
// `n` bytes, into dst. Input is read in pieces of at most 1 MiB. If `crc` is non-null, the
// CRC-32C of the compressed bytes is extended into it.
Status ZstdDecompressExact(const FileSet& files, const StoredValue& v, uint64_t offset,
                           uint64_t length, uint8_t* dst, size_t n, uint32_t* crc = nullptr);

// One frame. Level 0 is zstd's default level. TensorStore records the content size in the
// frames of OCDBT envelopes (riegeli) and zarr3 chunks, not in zarr v2 chunks; matching it keeps our bytes
// identical to its.
Result<std::string> ZstdCompress(const void* src, size_t n, int level, bool content_size);

}  // namespace gk::orbax
