#include "formats/npy.h"

namespace gk {

Result<NpyWriter> NpyWriter::Create(const std::string& path, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t total = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ", ";
    total *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (n,) keeps its comma
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n' padded to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  GK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  const uint16_t len = uint16_t(header.size());
  const char preamble[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, char(len & 0xff), char(len >> 8)};
  GK_RETURN_IF_ERROR(f.Write(preamble, 10));
  GK_RETURN_IF_ERROR(f.Write(header));
  return NpyWriter(std::move(f), total);
}

Status NpyWriter::Append(const float* data, int64_t count) {
  if (written_ + count > total_) return Status::Error(StrCat(file_.path(), ": more data than the declared shape"));
  written_ += count;
  return file_.Write(data, size_t(count) * sizeof(float));
}

Status NpyWriter::Commit() {
  if (written_ != total_) {
    return Status::Error(StrCat(file_.path(), ": wrote ", written_, " of ", total_, " elements"));
  }
  return file_.Commit();
}

}  // namespace gk
