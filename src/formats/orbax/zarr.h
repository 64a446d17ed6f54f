// Zarr v2 (.zarray) and zarr v3 (zarr.json) arrays as Orbax stores them, inside OCDBT or as
// plain directories. Spec: ../shared/spec/orbax.md §4.
//
//   zarr v2   one stored value per chunk, key "<i0>.<i1>..." ("0" for rank 0); the value is
//             one zstd frame (or raw bytes) of the full chunk in C order, little-endian; edge
//             chunks are stored padded to the full chunk shape.
//   zarr3     key "c/<i0>/<i1>..." ("c" for rank 0); Orbax wraps each chunk in the
//             sharding_indexed codec with one inner chunk per shard: the zstd frame, then an
//             index of (offset u64 LE, nbytes u64 LE) per inner chunk in C order, then the
//             CRC-32C of the index. Shards holding several inner chunks (other writers) and
//             an index at the start are read too.
//
// Supported: dtypes that tensor/dtype.h has (others parse, with dtype kUnknown, and fail on
// read); C order; zstd or no compression; the bytes codec in either endianness; crc32c
// codecs. Not supported (clear error): F order, filters, blosc/gzip/zlib, transpose, nested
// sharding. Every chunk must be present (Orbax writes them all and restores with
// fill_missing_data_reads=false).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/orbax/file_set.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::orbax::zarr {

// Upper bound on one chunk's decoded size; a larger chunk in metadata is treated as corrupt.
constexpr uint64_t kMaxChunkBytes = 16ull << 30;

// bytes codec -> [zstd] -> [crc32c]: how one chunk's bytes are encoded.
struct Chain {
  bool big_endian = false;
  bool zstd = false;
  bool crc32c = false;
};

struct ArrayMeta {
  int zarr_format = 2;
  std::vector<int64_t> shape;
  std::vector<int64_t> chunk_shape;  // the stored-key grid (zarr3 with sharding: the shard shape)
  std::string dtype_name;            // as stored: "<f4", "bfloat16", "float32", ...
  DType dtype = DType::kUnknown;     // kUnknown: a type tensor/dtype.h cannot hold
  size_t item_size = 0;              // bytes per element (0 when unknown)

  // Keys: zarr v2 joins grid indices with `separator`; zarr3's default encoding prefixes "c".
  char separator = '.';
  bool c_prefix = false;

  Chain chain;  // the stored value of a chunk (v2; zarr3 without sharding)

  bool sharded = false;  // zarr3 sharding_indexed
  std::vector<int64_t> inner_chunk_shape;
  Chain inner_chain;
  bool index_at_end = true;
  bool index_crc32c = false;
  bool index_big_endian = false;

  int zstd_level = 0;  // the level recorded in the metadata (informational)

  int rank() const { return int(shape.size()); }
  uint64_t numel() const;
  uint64_t nbytes() const { return numel() * item_size; }
  // Chunks per dimension of the key grid (0 along an empty dimension).
  std::vector<int64_t> GridShape() const;
  // The key of chunk `grid` relative to the array's prefix: "0.1", "c/0/1", "0", "c".
  std::string ChunkKey(const std::vector<int64_t>& grid) const;
};

// `zarr_format` is 2 for a .zarray, 3 for a zarr.json. Errors are one line without the file
// name (callers add it).
Result<ArrayMeta> ParseMetadata(std::string_view text, int zarr_format);

// Metadata as Orbax (TensorStore) writes it: keys sorted, no whitespace; zarr v2 with the
// zstd compressor at level 1 (or null), zarr3 with sharding_indexed holding one inner chunk
// (bytes little-endian + zstd level 3, index bytes + crc32c). Zero-size dimensions get chunk
// size 1.
Result<ArrayMeta> MakeOrbaxMeta(int zarr_format, DType dtype, const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& chunk_shape, bool zstd);
std::string MetadataJson(const ArrayMeta& m);

// zarr v2 / v3 dtype spellings of our dtypes ("" when there is none).
std::string ZarrV2DTypeName(DType t);
std::string Zarr3DTypeName(DType t);

// Looks up a stored value by its full key; nullptr when absent.
using GetValueFn = std::function<const StoredValue*(const std::string& key)>;

// Reads the whole array into dst (nbytes(), C order, little-endian) chunk by chunk.
// `key_prefix` is "<param name>/". Memory: one chunk buffer (none when a chunk maps onto one
// contiguous run of dst) plus 1 MiB of compressed input at a time.
Status ReadArray(const ArrayMeta& m, const std::string& key_prefix, const FileSet& files,
                 const GetValueFn& get, uint8_t* dst);

// Encodes the array held in src (nbytes(), C order) chunk by chunk in C order of the grid,
// handing each stored value to `put` with its full key (key_prefix + chunk key).
using PutValueFn = std::function<Status(std::string key, std::string_view value)>;
Status WriteArray(const ArrayMeta& m, const std::string& key_prefix, const uint8_t* src,
                  const PutValueFn& put);

}  // namespace gk::orbax::zarr
