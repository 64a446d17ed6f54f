#include "model/train/lora_tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "dist/communicator.h"
#include "model/toy_models_test_util.h"
#include "model/train/training_model.h"
#include "model/weights.h"

namespace gk {
namespace {

LoraOptions Options() {
  LoraOptions o;
  o.rank = 4;
  o.alpha = 8;
  o.dropout = 0.1;
  return o;
}

// PEFT's initialisation, then B random too (B = 0 would leave A's gradient zero).
LoraAdapter WholeAdapter(const ModelConfig& c, const std::string& prefix) {
  LoraAdapter a = *LoraAdapter::Create(c, prefix, Options());
  a.InitPeft(5);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (LoraModule& m : a.modules()) {
    for (float& v : m.b) v = u(rng);
  }
  return a;
}

// Slicing a whole adapter for every rank and putting the shares back together gives it again:
// rows of B for q/k/v/gate/up (replicated KV heads: the same rows on several ranks), columns of
// A for o/down.
TEST(LoraTensorParallel, SharesCoverTheWholeAdapter) {
  ModelConfig c = ToyConfig("tiny", 8);  // 4 query heads; KV heads 2 (sliding), 1 (full)
  const LoraAdapter whole = WholeAdapter(c, "model.");
  for (int tp : {2, 4}) {
    const ModelConfig local = *ShardModelConfig(c, tp);
    for (int rank = 0; rank < tp; ++rank) {
      LoraAdapter part = *LoraAdapter::Create(local, "model.", Options());
      ASSERT_TRUE(SliceLoraAdapter(whole, c, TensorParallel{nullptr, rank, tp}, &part).ok());
      for (size_t i = 0; i < whole.modules().size(); ++i) {
        const LoraModule &w = whole.modules()[i], &p = part.modules()[i];
        ASSERT_EQ(p.a.size(), size_t(p.in * 4));
        ASSERT_EQ(p.b.size(), size_t(p.out * 4));
        if (w.target == LoraTarget::kO || w.target == LoraTarget::kDown) {
          EXPECT_EQ(p.b, w.b);
          EXPECT_EQ(p.a[size_t(p.in) - 1], w.a[size_t(rank * p.in + p.in - 1)]);  // row 0, last column
        } else {
          EXPECT_EQ(p.a, w.a);
          int64_t first = rank * p.out;
          if (w.target == LoraTarget::kK || w.target == LoraTarget::kV) {
            const int64_t H = c.HeadDim(w.layer);
            first = int64_t(FirstKvHead(c.KvHeads(w.layer), tp, rank)) * H;
          }
          EXPECT_EQ(p.b.front(), w.b[size_t(first * 4)]) << w.name;
          EXPECT_EQ(p.b.back(), w.b[size_t((first + p.out) * 4 - 1)]) << w.name;
        }
      }
    }
  }
  LoraAdapter wrong = *LoraAdapter::Create(c, "model.", Options());
  EXPECT_FALSE(SliceLoraAdapter(whole, c, TensorParallel{nullptr, 0, 2}, &wrong).ok());
}

// Run as `mpirun -np N gemmakit_tests --gtest_filter=...:MpiTensorParallelTest.*` (ctest
// mpi_communicator_np2/np4); skipped in a single process. Every rank trains one micro-batch
// (two packed rows, dropout 0.1) through the whole model and through its share, then compares
// the loss and, after ReduceLoraGradsOverTp, its share of every LoRA gradient.
TEST(MpiTensorParallelTest, TrainingGradientsEqualOneProcess) {
  if (!dist::LaunchedByMpi()) GTEST_SKIP() << "not started by mpirun";
  auto world = dist::World();
  ASSERT_TRUE(world.ok()) << world.message();
  dist::Communicator* comm = *world;
  if (comm->size() < 2) GTEST_SKIP() << "one rank";
  const TensorParallel tp{comm, comm->rank(), comm->size()};
  for (const char* preset : {"tiny", "tiny-e2b", "gemma3-270m"}) {
    SCOPED_TRACE(preset);
    ModelConfig c = ToyConfig(preset, 4);
    c.vocab_size = c.vocab_size_per_layer_input = 301;
    const std::string dir = WriteToyModel(c, std::string("tp_train_") + preset, DType::kF32, 13);
    ThreadPool pool(1);
    TrainingModelOptions to;
    to.max_tokens = 64;
    const std::vector<int32_t> t0 = {2, 17, 300, 99, 5, 150, 8, 44, 12}, t1 = {2, 151, 0, 12, 299, 7};
    const std::vector<uint8_t> m0 = {0, 0, 0, 1, 1, 1, 1, 1, 1}, m1 = {0, 1, 1, 1, 1, 1};
    const TrainRowView rows[] = {{t0, m0}, {t1, m1}};

    auto whole_w = LoadWeights(dir, c);
    ASSERT_TRUE(whole_w.ok()) << whole_w.message();
    const std::string prefix = whole_w->prefix;
    LoraAdapter whole = WholeAdapter(c, prefix);
    const ModelConfig local = *ShardModelConfig(c, tp.size);
    LoraAdapter part = *LoraAdapter::Create(local, prefix, Options());
    ASSERT_TRUE(SliceLoraAdapter(whole, c, tp, &part).ok());
    LoraAdapter back = *LoraAdapter::Create(c, prefix, Options());
    ASSERT_TRUE(GatherLoraAdapter(part, c, tp, &back).ok());  // the shares put together again
    for (size_t i = 0; i < back.modules().size(); ++i) {
      EXPECT_EQ(back.modules()[i].a, whole.modules()[i].a) << back.modules()[i].name;
      EXPECT_EQ(back.modules()[i].b, whole.modules()[i].b) << back.modules()[i].name;
    }

    MicroBatchStats want, got;
    auto tm = TrainingModel::Create(c, std::move(*whole_w), &whole, &pool, to);
    ASSERT_TRUE(tm.ok()) << tm.message();
    ASSERT_TRUE((*tm)->ForwardBackward(rows, 1.f / 11, 7, &want).ok());

    auto part_w = LoadWeights(dir, c, WeightLoadMode::kCopy, tp);
    ASSERT_TRUE(part_w.ok()) << part_w.message();
    to.tp = tp;
    auto tp_model = TrainingModel::Create(local, std::move(*part_w), &part, &pool, to);
    ASSERT_TRUE(tp_model.ok()) << tp_model.message();
    ASSERT_TRUE((*tp_model)->ForwardBackward(rows, 1.f / 11, 7, &got).ok());
    ASSERT_TRUE(ReduceLoraGradsOverTp(part, c, tp).ok());

    EXPECT_EQ(got.targets, want.targets);
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::fabs(want.loss_sum));
    auto norm2 = LoraGradSquaredNorm(part, c, tp);  // replicated parts counted once
    ASSERT_TRUE(norm2.ok()) << norm2.message();
    EXPECT_NEAR(*norm2, *LoraGradSquaredNorm(whole, c, TensorParallel{}), 1e-4 * *norm2);
    LoraAdapter expect = *LoraAdapter::Create(local, prefix, Options());
    ASSERT_TRUE(SliceLoraAdapter(whole, c, tp, &expect).ok());  // the whole gradients' share
    for (size_t i = 0; i < part.modules().size(); ++i) {
      const LoraModule &g = part.modules()[i], &e = expect.modules()[i];
      for (auto [gv, ev, what] : {std::tuple{&g.grad_a, &e.grad_a, "A"}, std::tuple{&g.grad_b, &e.grad_b, "B"}}) {
        ASSERT_EQ(gv->size(), ev->size());
        double scale = 0, err = 0;
        for (size_t k = 0; k < ev->size(); ++k) {
          scale = std::max(scale, double(std::fabs((*ev)[k])));
          err = std::max(err, double(std::fabs((*gv)[k] - (*ev)[k])));
        }
        EXPECT_GT(scale, 0.0) << g.name << " " << what;
        EXPECT_LE(err, 1e-4 * scale) << g.name << " grad " << what << ": max |difference| " << err << " of " << scale;
      }
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace gk
