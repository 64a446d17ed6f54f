// OCDBT codecs: the spec's worked example (the root manifest of a real fixture), encode/decode
// round trips of every structure, and hand-made corrupt objects, each with a precise error.
#include "formats/orbax/ocdbt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "formats/orbax/crc32c.h"
#include "util/atomic_file.h"

#ifndef GK_SOURCE_DIR
#define GK_SOURCE_DIR "."
#endif

namespace gk::orbax::ocdbt {
namespace {

namespace fs = std::filesystem;

// ../shared/spec/orbax.md §3.4: the 113-byte manifest and the 240-byte root node of
// v0_checkpoints/direct_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata.
TEST(OcdbtTest, SpecWorkedExample) {
  const std::string dir = std::string(GK_SOURCE_DIR) +
                          "/../shared/fixtures/orbax/orbax-compat/v0_checkpoints/direct_checkpoint/"
                          "checkpoint_metadata_present/pytree_checkpointable_has_metadata";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is absent (the fixtures live in ../shared, not in the repository)";
  auto bytes = ReadFile(dir + "/manifest.ocdbt");
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), 113u);
  auto m = DecodeManifest(*bytes);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->config.manifest_kind, 0);
  EXPECT_EQ(m->config.max_inline_value_bytes, 1024u);
  EXPECT_EQ(m->config.max_decoded_node_bytes, 100000000u);
  EXPECT_EQ(m->config.version_tree_arity_log2, 4);
  EXPECT_EQ(m->config.compression, 1u);
  EXPECT_EQ(m->config.zstd_level, 0);
  ASSERT_EQ(m->files.size(), 1u);
  EXPECT_EQ(m->files[0].base_path, "");
  EXPECT_EQ(m->files[0].relative_path, "d/9f51d9b77c0c771353c577b65dc7bba5");
  ASSERT_EQ(m->versions.size(), 1u);
  const Version& v = m->versions[0];
  EXPECT_EQ(v.generation, 1u);
  EXPECT_EQ(v.root_height, 0);
  EXPECT_EQ(v.root.file, 0u);
  EXPECT_EQ(v.root.offset, 0u);
  EXPECT_EQ(v.root.length, 240u);
  EXPECT_EQ(v.root.stats.num_keys, 4u);
  EXPECT_EQ(v.root.stats.num_tree_bytes, 240u);
  EXPECT_EQ(v.root.stats.num_indirect_value_bytes, 0u);
  EXPECT_EQ(v.commit_time_ns, 0x18af46e82923b7eeull);  // ee b7 23 29 e8 46 af 18
  EXPECT_TRUE(m->version_nodes.empty());

  auto node_bytes = ReadFile(dir + "/" + m->files[0].path());
  ASSERT_TRUE(node_bytes.ok());
  auto body = DecodeEnvelope(*node_bytes, kBtreeNodeMagic, "b-tree node", 1u << 20);
  ASSERT_TRUE(body.ok()) << body.message();
  EXPECT_EQ(body->size(), 432u);
  auto node = DecodeBtreeNode(*node_bytes, "", 1u << 20);
  ASSERT_TRUE(node.ok()) << node.message();
  EXPECT_EQ(node->height, 0);
  EXPECT_TRUE(node->files.empty());
  ASSERT_EQ(node->leaf.size(), 4u);
  const char* keys[] = {"a/.zarray", "a/0", "b.c/.zarray", "b.c/0"};
  const uint64_t lengths[] = {164, 41, 164, 21};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(node->leaf[size_t(i)].key, keys[i]);
    EXPECT_FALSE(node->leaf[size_t(i)].out_of_line);
    EXPECT_EQ(node->leaf[size_t(i)].value.size(), lengths[i]);
  }
  // Re-encoding the decoded node reproduces TensorStore's bytes exactly.
  auto again = EncodeBtreeNode(*node, true, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *node_bytes);
}

Manifest SampleManifest() {
  Manifest m;
  for (int i = 0; i < 16; ++i) m.config.uuid[size_t(i)] = uint8_t(i * 7);
  m.files = {DataFile{"", "d/aa"}, DataFile{"", "d/ab"}, DataFile{"ocdbt.process_0/", "d/00"},
             DataFile{"ocdbt.process_1/", "d/00"}};
  for (uint64_t g = 1; g <= 3; ++g) {
    Version v;
    v.generation = 16 + g;
    v.root_height = uint8_t(g - 1);
    v.root = NodeRef{g % 4, 1000 * g, 77 + g, {g, 2 * g, 3 * g}};
    v.commit_time_ns = 1700000000000000000ull + g;
    m.versions.push_back(v);
  }
  VersionNodeRef vn;
  vn.generation = 16;
  vn.file = 1;
  vn.offset = 5;
  vn.length = 99;
  vn.num_generations = 16;
  vn.commit_time_ns = 42;
  vn.height = 1;
  m.version_nodes.push_back(vn);
  return m;
}

TEST(OcdbtTest, ManifestRoundTrip) {
  const Manifest m = SampleManifest();
  for (const bool zstd : {false, true}) {
    auto enc = EncodeManifest(m, zstd);
    ASSERT_TRUE(enc.ok()) << enc.message();
    auto dec = DecodeManifest(*enc);
    ASSERT_TRUE(dec.ok()) << dec.message();
    EXPECT_EQ(dec->config.uuid, m.config.uuid);
    ASSERT_EQ(dec->files.size(), m.files.size());
    for (size_t i = 0; i < m.files.size(); ++i) EXPECT_TRUE(dec->files[i] == m.files[i]) << i;
    ASSERT_EQ(dec->versions.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(dec->versions[i].generation, m.versions[i].generation);
      EXPECT_EQ(dec->versions[i].root_height, m.versions[i].root_height);
      EXPECT_EQ(dec->versions[i].root.file, m.versions[i].root.file);
      EXPECT_EQ(dec->versions[i].root.offset, m.versions[i].root.offset);
      EXPECT_EQ(dec->versions[i].root.length, m.versions[i].root.length);
      EXPECT_EQ(dec->versions[i].root.stats.num_indirect_value_bytes, m.versions[i].root.stats.num_indirect_value_bytes);
      EXPECT_EQ(dec->versions[i].commit_time_ns, m.versions[i].commit_time_ns);
    }
    ASSERT_EQ(dec->version_nodes.size(), 1u);
    EXPECT_EQ(dec->version_nodes[0].length, 99u);
    EXPECT_EQ(dec->version_nodes[0].height, 1);
  }
}

// A node's table resolves relative to the base path of the reference that led to it (the
// "transitive path"), as in TensorStore's data_file_id_codec_test AddBasePath.
TEST(OcdbtTest, TransitivePaths) {
  BtreeNode n;
  n.height = 0;
  n.files = {DataFile{"", "d/x"}, DataFile{"sub/", "d/y"}};
  LeafEntry a, b;
  a.key = "k1";
  a.out_of_line = true;
  a.file = 0;
  a.offset = 3;
  a.length = 2000;
  b.key = "k2";
  b.out_of_line = true;
  b.file = 1;
  b.offset = 9;
  b.length = 3000;
  n.leaf = {a, b};
  auto enc = EncodeBtreeNode(n, false, 0);
  ASSERT_TRUE(enc.ok()) << enc.message();
  auto dec = DecodeBtreeNode(*enc, "ocdbt.process_3/", 1u << 20);
  ASSERT_TRUE(dec.ok()) << dec.message();
  EXPECT_EQ(dec->files[0].base_path, "ocdbt.process_3/");
  EXPECT_EQ(dec->files[0].path(), "ocdbt.process_3/d/x");
  EXPECT_EQ(dec->files[1].base_path, "ocdbt.process_3/sub/");
  EXPECT_EQ(dec->files[1].path(), "ocdbt.process_3/sub/d/y");
  EXPECT_EQ(dec->leaf[1].offset, 9u);
  EXPECT_EQ(dec->leaf[1].length, 3000u);
}

TEST(OcdbtTest, InteriorNodeRoundTrip) {
  BtreeNode n;
  n.height = 2;
  n.files = {DataFile{"", "d/0123"}};
  for (int i = 0; i < 5; ++i) {
    InteriorEntry e;
    e.key = StrCat("layers.", i, ".attn/c/0");
    e.subtree_common_prefix_length = 7;
    e.child = NodeRef{0, uint64_t(100 * i), uint64_t(50 + i), {uint64_t(i), uint64_t(2 * i), uint64_t(i * i)}};
    n.interior.push_back(e);
  }
  for (const bool zstd : {false, true}) {
    auto enc = EncodeBtreeNode(n, zstd, 0);
    ASSERT_TRUE(enc.ok()) << enc.message();
    auto dec = DecodeBtreeNode(*enc, "", 1u << 20);
    ASSERT_TRUE(dec.ok()) << dec.message();
    EXPECT_EQ(dec->height, 2);
    ASSERT_EQ(dec->interior.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(dec->interior[size_t(i)].key, n.interior[size_t(i)].key);
      EXPECT_EQ(dec->interior[size_t(i)].subtree_common_prefix_length, 7u);
      EXPECT_EQ(dec->interior[size_t(i)].child.offset, uint64_t(100 * i));
      EXPECT_EQ(dec->interior[size_t(i)].child.stats.num_indirect_value_bytes, uint64_t(i * i));
    }
  }
}

// ---- Hand-made corrupt objects ----

std::string Envelope(uint32_t magic, const std::string& body) {
  auto e = EncodeEnvelope(magic, body, false, 0);
  EXPECT_TRUE(e.ok());
  return e.ok() ? *e : "";
}

std::string NodeError(const std::string& body) {
  auto r = DecodeBtreeNode(Envelope(kBtreeNodeMagic, body), "", 1u << 20);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.message().find('\n'), std::string::npos);
  return r.ok() ? "" : r.message();
}

TEST(OcdbtTest, EnvelopeErrors) {
  const std::string good = Envelope(kBtreeNodeMagic, std::string("\x00\x00\x01\x01" "a" "\x01\x00" "v", 8));
  ASSERT_TRUE(DecodeBtreeNode(good, "", 1u << 20).ok()) << DecodeBtreeNode(good, "", 1u << 20).message();
  const auto err = [](const std::string& bytes, uint32_t magic) {
    auto r = DecodeEnvelope(bytes, magic, "b-tree node", 1u << 20);
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.message();
  };
  EXPECT_NE(err(good.substr(0, 10), kBtreeNodeMagic).find("shorter than the 16-byte minimum"), std::string::npos);
  EXPECT_NE(err(good, kManifestMagic).find("starts with magic 0x0cdb20de, expected 0x0cdb3a2a"), std::string::npos);
  EXPECT_NE(err(good.substr(0, good.size() - 1), kBtreeNodeMagic).find("header says 26 bytes but 25 are present"),
            std::string::npos);
  std::string flipped = good;
  flipped[15] ^= 4;
  EXPECT_NE(err(flipped, kBtreeNodeMagic).find("fails its CRC-32C check"), std::string::npos);
  // Wrong version and compression, with a correct CRC.
  const auto recrc = [](std::string s) {
    const uint32_t c = Crc32c(s.data(), s.size() - 4);
    for (int i = 0; i < 4; ++i) s[s.size() - 4 + size_t(i)] = char(uint8_t(c >> (8 * i)));
    return s;
  };
  std::string v1 = good;
  v1[12] = 1;
  EXPECT_NE(err(recrc(v1), kBtreeNodeMagic).find("format version 1"), std::string::npos);
  std::string c7 = good;
  c7[13] = 7;
  EXPECT_NE(err(recrc(c7), kBtreeNodeMagic).find("unsupported compression format 7"), std::string::npos);
  std::string z = good;
  z[13] = 1;  // claims zstd, but the body is raw
  EXPECT_NE(err(recrc(z), kBtreeNodeMagic).find("invalid zstd data"), std::string::npos);
}

// Leaf bodies built byte by byte: height, num_files, num_entries, then the columns.
TEST(OcdbtTest, LeafBodyErrors) {
  using namespace std::string_literals;
  // two keys "b", "a": out of order
  EXPECT_NE(NodeError("\x00\x00\x02\x00\x01\x01" "ba" "\x00\x00\x00\x00"s).find("invalid key order"), std::string::npos);
  // prefix length 3 exceeds the previous key length 1
  EXPECT_NE(NodeError("\x00\x00\x02\x03\x01\x01" "ab" "\x00\x00\x00\x00"s).find("exceeds the previous key length 1"),
            std::string::npos);
  // value_kind 2
  EXPECT_NE(NodeError("\x00\x00\x01\x01" "a" "\x00\x02"s).find("value_kind[0] = 2"), std::string::npos);
  // out-of-line value whose file id is outside an empty table
  EXPECT_NE(NodeError("\x00\x00\x01\x01" "a" "\x05\x01\x00\x00"s).find("outside the data-file table of 0 entries"),
            std::string::npos);
  // zero entries
  EXPECT_NE(NodeError("\x00\x00\x00"s).find("no entries"), std::string::npos);
  // a count far larger than the body
  EXPECT_NE(NodeError("\x00\x00\xff\xff\x3f"s).find("cannot fit"), std::string::npos);
  // truncated inside the inline value
  EXPECT_NE(NodeError("\x00\x00\x01\x01" "a" "\x05\x00" "xy"s).find("truncated in inline value[0]"), std::string::npos);
  // trailing garbage
  EXPECT_NE(NodeError("\x00\x00\x01\x01" "a" "\x01\x00" "vZZ"s).find("2 unexpected bytes after the end"), std::string::npos);
  // a varint running off the end / overflowing 64 bits
  EXPECT_NE(NodeError("\x00\x00\x01\x80"s).find("truncated in varint"), std::string::npos);
  EXPECT_NE(NodeError("\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"s).find("overflows 64 bits"), std::string::npos);
  // a key length beyond 65535
  EXPECT_NE(NodeError("\x00\x00\x01\x80\x80\x04"s).find("exceeds the limit of 65535"), std::string::npos);
  // out-of-line offset + length overflow
  EXPECT_NE(NodeError("\x00\x01\x01\x00" "x" "\x01\x01" "k" "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" "\x01\x00"
                      "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"s)
                .find("+ length 18446744073709551615 overflows"),
            std::string::npos);
}

TEST(OcdbtTest, DataFileTableErrors) {
  using namespace std::string_literals;
  // two files; the second claims a 5-byte prefix of a 3-byte path
  EXPECT_NE(NodeError("\x00\x02\x05\x03\x01\x00\x00" "abcd"s).find("exceeds the previous path length 3"), std::string::npos);
  // base path longer than the path
  EXPECT_NE(NodeError("\x00\x01\x02\x05" "ab"s).find("base_path_length[0] = 5 exceeds the path length 2"),
            std::string::npos);
}

TEST(OcdbtTest, ManifestErrors) {
  using namespace std::string_literals;
  const auto err = [](const std::string& body) {
    auto r = DecodeManifest(Envelope(kManifestMagic, body));
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.message();
  };
  const std::string uuid(16, 'u');
  EXPECT_NE(err(uuid + "\x02"s).find("manifest_kind = 2"), std::string::npos);
  EXPECT_NE(err(uuid + "\x00\x80\x08\x80\xc2\xd7\x2f\x00"s).find("arity_log2 = 0 is outside [1, 16]"), std::string::npos);
  EXPECT_NE(err(uuid + "\x00\x80\x08\x80\xc2\xd7\x2f\x04\x05"s).find("compression_method = 5"), std::string::npos);
  // config ok, empty table, no versions
  EXPECT_NE(err(uuid + "\x00\x80\x08\x80\xc2\xd7\x2f\x04\x00\x00\x00"s).find("lists no versions"), std::string::npos);
  EXPECT_NE(err(uuid.substr(0, 5)).find("truncated in config.uuid"), std::string::npos);
  // Every proper prefix of a valid manifest body fails cleanly.
  auto good = EncodeManifest(SampleManifest(), false);
  ASSERT_TRUE(good.ok());
  const std::string body = good->substr(14, good->size() - 18);
  for (size_t n = 0; n < body.size(); ++n) EXPECT_FALSE(DecodeManifest(Envelope(kManifestMagic, body.substr(0, n))).ok());
  EXPECT_TRUE(DecodeManifest(Envelope(kManifestMagic, body)).ok());
}

// Random bodies and random mutations of valid ones (with the CRC fixed up) never crash.
TEST(OcdbtTest, MutatedObjectsDecodeOrFailCleanly) {
  std::mt19937 rng(7);
  auto good_m = EncodeManifest(SampleManifest(), false);
  BtreeNode n;
  n.files = {DataFile{"", "d/x"}};
  for (int i = 0; i < 20; ++i) {
    LeafEntry e;
    e.key = StrCat("param.", i < 10 ? "0" : "", i, "/c/0");
    e.out_of_line = i % 3 == 0;
    e.length = e.out_of_line ? 5000 : 7;
    e.value = e.out_of_line ? "" : "0123456";
    n.leaf.push_back(e);
  }
  auto good_n = EncodeBtreeNode(n, false, 0);
  ASSERT_TRUE(good_m.ok() && good_n.ok());
  int ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const bool manifest = iter % 2 == 0;
    std::string body = manifest ? good_m->substr(14, good_m->size() - 18) : good_n->substr(14, good_n->size() - 18);
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) body[rng() % body.size()] = char(rng());
    if (rng() % 5 == 0) body.resize(rng() % (body.size() + 1));
    if (manifest) {
      ok += DecodeManifest(Envelope(kManifestMagic, body)).ok();
    } else {
      ok += DecodeBtreeNode(Envelope(kBtreeNodeMagic, body), "t/", 1u << 20).ok();
    }
  }
  EXPECT_LT(ok, 20000);
}

}  // namespace
}  // namespace gk::orbax::ocdbt
