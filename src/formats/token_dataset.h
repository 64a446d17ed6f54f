// A tokenized fine-tuning data set on disk, written once by `gemmakit data prepare` and read by
// every training run (so that a run never re-tokenizes).
//
// Layout of DIR:
//   dataset.json             {"format": "gemmakit-token-dataset", "version": 1, "rows": R,
//                             "tokens": total, "loss_tokens": total targets, "shards": [
//                             {"file": "shard-00000.safetensors", "rows": r}, ...],
//                             "meta": {...}}  (meta: whatever the writer passes: source, counts,
//                             tokenizer, max_seq_len, loss mode)
//   shard-NNNNN.safetensors  three tensors: "tokens" I32 (n), "loss_mask" U8 (n),
//                             "offsets" I64 (r + 1; row i is [offsets[i], offsets[i+1]))
// Standard safetensors, so any safetensors reader can inspect a shard.
//
// loss_mask[i] = 1 when token i is a training target: the loss counts the prediction of token
// i from tokens [0, i). loss_mask[0] is always 0 (nothing predicts the first token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk {

struct TokenRow {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;  // same length as tokens
};

// Writes rows in order, `rows_per_shard` to a shard, atomically: files go to DIR.tmp-<pid>,
// are fsynced, and the directory is renamed to DIR (an existing DIR is replaced only after
// the new one is complete, by renameat2(RENAME_EXCHANGE) where the file system has it).
// Errors: no rows, empty row, mask/token length mismatch, mask not 0/1 or 1 on a row's first
// token, negative id, an existing DIR holding files that are not a data set's (refused rather
// than deleted), I/O.
Status WriteTokenDataset(const std::string& dir, const std::vector<TokenRow>& rows,
                         const nlohmann::json& meta, int64_t rows_per_shard = 4096);

class TokenDataset {
 public:
  // Validates dataset.json and every shard (tensor names, dtypes, shapes, offsets monotone and
  // ending at n, row counts matching dataset.json, mask values 0/1). Errors name the file.
  static Result<TokenDataset> Open(const std::string& dir);

  int64_t rows() const { return int64_t(row_shard_.size()); }
  int64_t total_tokens() const { return total_tokens_; }
  int64_t total_loss_tokens() const { return total_loss_tokens_; }
  int64_t RowLength(int64_t i) const { return lengths_[size_t(i)]; }
  const nlohmann::json& meta() const { return meta_; }
  // Row i (0 <= i < rows()).
  TokenRow Row(int64_t i) const;

 private:
  static Result<TokenDataset> OpenUnguarded(const std::string& dir);  // Open without GuardedParse
  struct Shard {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> mask;
    std::vector<int64_t> offsets;
  };
  std::vector<Shard> shards_;
  std::vector<int32_t> row_shard_;    // per row: its shard
  std::vector<int64_t> row_local_;    // per row: its index within the shard
  std::vector<int64_t> lengths_;
  int64_t total_tokens_ = 0, total_loss_tokens_ = 0;
  nlohmann::json meta_;
};

}  // namespace gk
