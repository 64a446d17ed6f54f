// libFuzzer target for token data sets (src/formats/token_dataset.h): dataset.json NUL
// shard-00000.safetensors. A data set that opens must hand out every row, with the lengths
// and totals it declared.
#include <cstdint>

#include "formats/token_dataset.h"
#include "fuzz_util.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::SplitNul(fuzz::AsText(data, size), 2);
  if (parts.size() != 2) return 0;
  const std::string& dir = fuzz::FreshDir("dataset");
  fuzz::WriteBytes(dir + "/dataset.json", parts[0]);
  fuzz::WriteBytes(dir + "/shard-00000.safetensors", parts[1]);
  auto ds = TokenDataset::Open(dir);
  if (!ds.ok()) {
    fuzz::Check(!ds.message().empty());
    return 0;
  }
  int64_t tokens = 0, loss = 0;
  for (int64_t i = 0; i < ds->rows(); ++i) {
    const TokenRow row = ds->Row(i);
    fuzz::Check(int64_t(row.tokens.size()) == ds->RowLength(i) && row.loss_mask.size() == row.tokens.size());
    fuzz::Check(!row.tokens.empty() && row.loss_mask[0] == 0);
    tokens += int64_t(row.tokens.size());
    for (uint8_t m : row.loss_mask) loss += m;
  }
  fuzz::Check(tokens == ds->total_tokens() && loss == ds->total_loss_tokens());
  return 0;
}
