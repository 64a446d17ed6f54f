// libFuzzer target for the OCDBT decoders (src/formats/orbax/ocdbt.h): manifests and B+tree
// nodes. Byte 0 picks the decoder; the rest is an object body, wrapped in a valid envelope
// (raw or zstd, CRC computed) so that mutations reach the parsers behind the checksum, or fed
// as a whole encoded object (selectors 4, 5) to exercise the envelope checks themselves.
// Whatever decodes must survive encode -> decode unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "formats/orbax/ocdbt.h"

using namespace gk::orbax::ocdbt;

namespace {

void Check(bool cond) {
  if (!cond) std::abort();
}

void RoundTripManifest(const Manifest& m) {
  auto enc = EncodeManifest(m, false);
  if (!enc.ok()) return;  // e.g. an unsorted data-file table, which the encoder refuses
  auto again = DecodeManifest(*enc);
  Check(again.ok());
  Check(again->versions.size() == m.versions.size());
  Check(again->files.size() == m.files.size());
  for (size_t i = 0; i < m.versions.size(); ++i) {
    Check(again->versions[i].generation == m.versions[i].generation);
    Check(again->versions[i].root.offset == m.versions[i].root.offset);
    Check(again->versions[i].root.length == m.versions[i].root.length);
  }
}

void RoundTripNode(const BtreeNode& n) {
  auto enc = EncodeBtreeNode(n, false, 0);
  if (!enc.ok()) return;
  auto again = DecodeBtreeNode(*enc, "", 1u << 24);
  Check(again.ok());
  Check(again->height == n.height && again->leaf.size() == n.leaf.size() && again->interior.size() == n.interior.size());
  for (size_t i = 0; i < n.leaf.size(); ++i) {
    Check(again->leaf[i].key == n.leaf[i].key && again->leaf[i].value == n.leaf[i].value &&
          again->leaf[i].out_of_line == n.leaf[i].out_of_line && again->leaf[i].length == n.leaf[i].length);
  }
  for (size_t i = 0; i < n.interior.size(); ++i) {
    Check(again->interior[i].key == n.interior[i].key &&
          again->interior[i].subtree_common_prefix_length == n.interior[i].subtree_common_prefix_length &&
          again->interior[i].child.offset == n.interior[i].child.offset);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int sel = data[0] % 6;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (sel) {
    case 0:
    case 1: {
      auto env = EncodeEnvelope(kManifestMagic, rest, sel == 1, 1);
      if (!env.ok()) return 0;
      auto m = DecodeManifest(*env);
      if (m.ok()) RoundTripManifest(*m);
      break;
    }
    case 2:
    case 3: {
      auto env = EncodeEnvelope(kBtreeNodeMagic, rest, sel == 3, 1);
      if (!env.ok()) return 0;
      auto n = DecodeBtreeNode(*env, "ocdbt.process_0/", 1u << 24);
      if (n.ok()) {
        for (DataFile& f : n->files) f.base_path.erase(0, 16);  // drop the transitive part again
        RoundTripNode(*n);
      }
      break;
    }
    case 4:
      (void)DecodeManifest(rest);
      break;
    case 5:
      (void)DecodeBtreeNode(rest, "", 1u << 24);
      break;
  }
  return 0;
}
