#include "engines/serve/tensor_parallel_steps.h"

#include <array>
#include <vector>

#include "dist/communicator.h"

namespace gk {
namespace {

// A batch as int64 words: item count (-1: serving ended), then per item: token count, logits
// mode, positions already cached, the two block tables' lengths, the tokens, the tables.
std::vector<int64_t> Encode(std::span<const PagedBatchItem> items) {
  std::vector<int64_t> w{int64_t(items.size())};
  for (const PagedBatchItem& it : items) {
    w.insert(w.end(), {int64_t(it.tokens.size()), int64_t(it.logits), it.seq->num_tokens,
                       int64_t(it.seq->blocks[0].size()), int64_t(it.seq->blocks[1].size())});
    w.insert(w.end(), it.tokens.begin(), it.tokens.end());
    for (int g = 0; g < 2; ++g) w.insert(w.end(), it.seq->blocks[g].begin(), it.seq->blocks[g].end());
  }
  return w;
}

Status Send(dist::Communicator& comm, std::vector<int64_t> words) {
  int64_t n = int64_t(words.size());
  GK_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(&n, 1)), 0));
  return comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(words)), 0);
}

// Storage of a received batch: the spans of items point into it.
struct Received {
  std::vector<int32_t> tokens, blocks;
  std::vector<PagedSequence> seqs;
  std::vector<PagedBatchItem> items;
};

Status Decode(const std::vector<int64_t>& w, Received* r) {
  auto bad = [] { return Status::Error("tensor-parallel serving: malformed batch from rank 0"); };
  size_t at = 1;
  const int64_t n_items = w[0];
  r->tokens.clear();
  r->blocks.clear();
  r->seqs.assign(size_t(n_items), PagedSequence{});
  r->items.assign(size_t(n_items), PagedBatchItem{});
  std::vector<std::array<size_t, 5>> offsets;  // tokens begin, count; blocks begin, per-group counts
  for (int64_t i = 0; i < n_items; ++i) {
    if (at + 5 > w.size()) return bad();
    const int64_t nt = w[at], mode = w[at + 1], cached = w[at + 2], b0 = w[at + 3], b1 = w[at + 4];
    at += 5;
    if (nt < 0 || b0 < 0 || b1 < 0 || at + size_t(nt + b0 + b1) > w.size()) return bad();
    offsets.push_back({r->tokens.size(), size_t(nt), r->blocks.size(), size_t(b0), size_t(b1)});
    for (int64_t k = 0; k < nt; ++k) r->tokens.push_back(int32_t(w[at++]));
    for (int64_t k = 0; k < b0 + b1; ++k) r->blocks.push_back(int32_t(w[at++]));
    r->seqs[size_t(i)].num_tokens = cached;
    r->items[size_t(i)].logits = LogitsMode(mode);
  }
  for (size_t i = 0; i < offsets.size(); ++i) {  // the vectors no longer grow: point into them
    PagedSequence& s = r->seqs[i];
    s.blocks[0] = {r->blocks.data() + offsets[i][2], offsets[i][3]};
    s.blocks[1] = {r->blocks.data() + offsets[i][2] + offsets[i][3], offsets[i][4]};
    r->items[i].tokens = {r->tokens.data() + offsets[i][0], offsets[i][1]};
    r->items[i].seq = &s;
  }
  return Status::Ok();
}

}  // namespace

Status SendPagedBatch(dist::Communicator& comm, std::span<const PagedBatchItem> items) {
  return Send(comm, Encode(items));
}

Status SendServingEnd(dist::Communicator& comm) { return Send(comm, {-1}); }

Status FollowPagedBatches(dist::Communicator& comm, GemmaModel& model, PagedKvPool& pool) {
  std::vector<int64_t> words;
  std::vector<float> logits;
  Received batch;
  const int64_t V = model.config().vocab_size;
  for (;;) {
    int64_t n = 0;
    GK_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(&n, 1)), 0));
    if (n < 1) return Status::Error("tensor-parallel serving: empty message from rank 0");
    words.resize(size_t(n));
    GK_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(words)), 0));
    if (words[0] < 0) return Status::Ok();
    GK_RETURN_IF_ERROR(Decode(words, &batch));
    int64_t rows = 0;
    for (const PagedBatchItem& it : batch.items) {
      rows += it.logits == LogitsMode::kAll ? int64_t(it.tokens.size()) : it.logits == LogitsMode::kLast ? 1 : 0;
    }
    if (int64_t(logits.size()) < rows * V) logits.resize(size_t(rows * V));
    GK_RETURN_IF_ERROR(model.ForwardPaged(batch.items, pool, logits.data()));
  }
}

}  // namespace gk
