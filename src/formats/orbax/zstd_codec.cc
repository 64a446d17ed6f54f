#include "formats/orbax/zstd_codec.h"

#include <zstd.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "formats/orbax/crc32c.h"

namespace gk::orbax {
namespace {

constexpr size_t kPieceBytes = 1u << 20;

struct DCtxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};
using DCtx = std::unique_ptr<ZSTD_DCtx, DCtxFree>;

}  // namespace

Result<std::string> ZstdDecompressBounded(std::string_view src, uint64_t cap) {
  using R = Result<std::string>;
  if (src.empty()) return R::Error("zstd data is empty");
  DCtx dctx(ZSTD_createDCtx());
  if (!dctx) return R::Error("cannot create a zstd decompression context");
  std::string out;
  out.resize(size_t(std::min<uint64_t>(cap, std::max<uint64_t>(64u << 10, 4 * src.size()))));
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  size_t ret = 1;
  for (;;) {
    const size_t in_before = in.pos, out_before = ob.pos;
    ret = ZSTD_decompressStream(dctx.get(), &ob, &in);
    if (ZSTD_isError(ret)) return R::Error(StrCat("invalid zstd data: ", ZSTD_getErrorName(ret)));
    if (in.pos == in.size && (ret == 0 || ob.pos < ob.size)) break;
    if (ob.pos == ob.size) {
      if (out.size() >= cap) return R::Error(StrCat("zstd data decodes to more than ", cap, " bytes"));
      out.resize(size_t(std::min<uint64_t>(cap, uint64_t(out.size()) * 2)));
      ob.dst = out.data();
      ob.size = out.size();
    } else if (in.pos == in_before && ob.pos == out_before) {
      return R::Error("zstd decoder made no progress; the data is corrupt");
    }
  }
  if (ret != 0) return R::Error("zstd frame is truncated (the input ends inside a frame)");
  out.resize(ob.pos);
  return out;
}

Status ZstdDecompressExact(const FileSet& files, const StoredValue& v, uint64_t offset,
                           uint64_t length, uint8_t* dst, size_t n, uint32_t* crc) {
  if (length == 0) return Status::Error("zstd data is empty");
  DCtx dctx(ZSTD_createDCtx());
  if (!dctx) return Status::Error("cannot create a zstd decompression context");
  std::vector<uint8_t> piece;
  ZSTD_outBuffer ob{dst, n, 0};
  size_t ret = 1;
  for (uint64_t done = 0; done < length;) {
    const size_t k = size_t(std::min<uint64_t>(kPieceBytes, length - done));
    const uint8_t* p;
    if (v.file < 0) {
      p = reinterpret_cast<const uint8_t*>(v.inline_bytes.data()) + offset + done;
    } else {
      piece.resize(k);
      GK_RETURN_IF_ERROR(ReadValue(files, v, offset + done, k, piece.data()));
      p = piece.data();
    }
    if (crc != nullptr) *crc = Crc32cExtend(*crc, p, k);
    ZSTD_inBuffer in{p, k, 0};
    for (;;) {
      const size_t in_before = in.pos, out_before = ob.pos;
      ret = ZSTD_decompressStream(dctx.get(), &ob, &in);
      if (ZSTD_isError(ret)) {
        return Status::Error(StrCat("invalid zstd data: ", ZSTD_getErrorName(ret)));
      }
      if (in.pos == in.size && (ret == 0 || ob.pos < ob.size)) break;
      if (in.pos == in_before && ob.pos == out_before) {
        if (ob.pos == ob.size) {
          return Status::Error(StrCat("zstd data decodes to more than the expected ", n, " bytes"));
        }
        return Status::Error("zstd decoder made no progress; the data is corrupt");
      }
    }
    done += k;
  }
  if (ret != 0) return Status::Error("zstd frame is truncated (the input ends inside a frame)");
  if (ob.pos != n) {
    return Status::Error(StrCat("zstd data decodes to ", ob.pos, " bytes, expected ", n));
  }
  return Status::Ok();
}

Result<std::string> ZstdCompress(const void* src, size_t n, int level, bool content_size) {
  using R = Result<std::string>;
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (!cctx) return R::Error("cannot create a zstd compression context");
  size_t r = ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  if (ZSTD_isError(r)) return R::Error(StrCat("zstd: ", ZSTD_getErrorName(r)));
  std::string out;
  out.resize(ZSTD_compressBound(n));
  r = ZSTD_compress2(cctx.get(), out.data(), out.size(), src, n);
  if (ZSTD_isError(r)) return R::Error(StrCat("zstd compression failed: ", ZSTD_getErrorName(r)));
  out.resize(r);
  return out;
}

}  // namespace gk::orbax
