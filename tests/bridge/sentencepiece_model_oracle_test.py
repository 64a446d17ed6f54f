#!/usr/bin/env python3
"""gemmakit's tokenizer.model reader (src/formats/sentencepiece_model.cc) against sentencepiece.

The Gemma 3 GGUF export takes tokens, scores and types from a checkpoint's tokenizer.model, a
protobuf ModelProto that gemmakit parses by hand. The oracle is the sentencepiece library
itself (Debian python3-sentencepiece) and the protobuf classes it ships
(sentencepiece_model_pb2, on Debian python3-protobuf), neither derived from gemmakit's code:
  * models trained by SentencePieceTrainer (unigram and BPE; byte fallback, control and
    user-defined symbols, non-ASCII pieces): every piece, score and type equals what
    ModelProto.FromString reads and what SentencePieceProcessor reports (id_to_piece,
    get_score, is_unknown / is_control / is_unused / is_byte);
  * a ModelProto written through the pb2 classes with every type, extreme and special scores,
    empty and non-UTF-8 pieces, every other ModelProto field set, and unknown fields appended;
  * repeated fields, type values outside the enum or past 32 bits, an empty piece, as raw bytes;
  * truncations of a trained model: refused exactly where protobuf refuses, and equal where both
    read it.
The parser's side is the test driver spm_pieces (tests/bridge/spm_pieces.cc), passed as --gemmakit.
Exit status 77 (a skip for ctest) without python3-sentencepiece or python3-protobuf.

usage: sentencepiece_model_oracle_test.py --gemmakit path/to/spm_pieces
"""
import argparse
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

SKIP = 77
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)
    return ok


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same_score(a, b):
    return (math.isnan(a) and math.isnan(b)) or struct.pack("<f", a) == struct.pack("<f", b)


def ours(driver, model_bytes, work):
    path = os.path.join(work, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(model_bytes)
    r = subprocess.run([driver, path], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit("spm_pieces failed: " + r.stderr.strip())
    out = json.loads(r.stdout)
    if "error" in out:
        return out["error"]
    return [(p.encode("latin-1"), f32(float(s)), t) for p, s, t in out["pieces"]]


def theirs(pb, model_bytes):
    """The pieces protobuf reads, or None when it refuses the bytes."""
    try:
        mp = pb.ModelProto.FromString(model_bytes)
    except Exception:  # google.protobuf.message.DecodeError
        return None
    return [(p.piece.encode("utf-8", "surrogateescape"), p.score, p.type) for p in mp.pieces]


def same_pieces(got, want):
    return len(got) == len(want) and all(g[0] == w[0] and same_score(g[1], w[1]) and g[2] == w[2]
                                         for g, w in zip(got, want))


def compare(label, got, want):
    if not check(isinstance(got, list), "%s: gemmakit refused it: %s" % (label, got)):
        return
    if not check(len(got) == len(want), "%s: %d pieces, protobuf reads %d" % (label, len(got), len(want))):
        return
    bad = [i for i, (g, w) in enumerate(zip(got, want))
           if g[0] != w[0] or not same_score(g[1], w[1]) or g[2] != w[2]]
    check(not bad, "%s: %d pieces differ, first id %s: %r vs %r" %
          (label, len(bad), bad[:1], got[bad[0]] if bad else None, want[bad[0]] if bad else None))


def train(spm, model_type, seed):
    rng = random.Random(seed)
    words = ["module", "input", "output", "wire", "reg", "always", "posedge", "clk", "assign", "endmodule",
             "données", "日本語", "ñandú", "∑x²", "🙂"]
    lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(500)]
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=300,
                                   model_type=model_type, byte_fallback=True, character_coverage=1.0,
                                   user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
                                   control_symbols=["<ctrl>"], normalization_rule_name="identity",
                                   minloglevel=2)
    return out.getvalue()


def processor_agrees(spm, label, model_bytes, got):
    """What SentencePieceProcessor itself reports about each id."""
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    if not check(sp.get_piece_size() == len(got), "%s: processor has %d pieces" % (label, sp.get_piece_size())):
        return
    bad = []
    for i, (piece, score, t) in enumerate(got):
        flags = (sp.is_unknown(i), sp.is_control(i), sp.is_unused(i), sp.is_byte(i))
        if (sp.id_to_piece(i).encode() != piece or not same_score(f32(sp.get_score(i)), score) or
                flags != (t == 2, t == 3, t == 5, t == 6)):
            bad.append(i)
    check(not bad, "%s: the processor disagrees on ids %s" % (label, bad[:5]))


def handmade(pb):
    """A ModelProto with every piece type, odd scores and pieces, and every other field set."""
    mp = pb.ModelProto()
    cases = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", -0.0, 3), ("", -1.5, 1), ("▁hello", -3.25, 1),
             ("<start_of_turn>", 0.0, 4), ("<unused0>", -1e30, 5), ("<0x0A>", 0.0, 6), ("inf", float("inf"), 1),
             ("-inf", float("-inf"), 1), ("nan", float("nan"), 1), ("tiny", 1e-45, 1), ("max", 3.4028234663852886e38, 1),
             ("日本", -7.0, 1)]
    for piece, score, t in cases:
        p = mp.pieces.add()
        p.piece = piece
        p.score = score
        if t != 1 or piece == "▁hello":  # NORMAL written explicitly once, left to the default elsewhere
            p.type = t
    mp.trainer_spec.model_type = pb.TrainerSpec.BPE
    mp.trainer_spec.vocab_size = len(cases)
    mp.trainer_spec.input.append("corpus.txt")
    mp.normalizer_spec.name = "identity"
    mp.normalizer_spec.precompiled_charsmap = bytes(range(256))
    mp.denormalizer_spec.name = "identity"
    sample = mp.self_test_data.samples.add()
    sample.input, sample.expected = "a", "b"
    return mp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True, help="the spm_pieces test driver")
    args = ap.parse_args()
    try:
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        print("SKIP: needs Debian's python3-sentencepiece and python3-protobuf:", e)
        return SKIP
    with tempfile.TemporaryDirectory(prefix="gk_spm_oracle_") as work:
        trained = {}
        for model_type, seed in (("unigram", 1), ("bpe", 2)):
            b = trained[model_type] = train(spm, model_type, seed)
            got = ours(args.gemmakit, b, work)
            compare("trained " + model_type, got, theirs(pb, b))
            if isinstance(got, list):
                processor_agrees(spm, "trained " + model_type, b, got)

        mp = handmade(pb)
        b = mp.SerializeToString()
        compare("handmade", ours(args.gemmakit, b, work), theirs(pb, b))
        # Unknown fields protobuf skips: a varint, a 64-bit, a length-delimited and a 32-bit
        # field after the known ones, and the same inside the first piece.
        unknown = bytes([0xc8, 0x06, 0x2a, 0xd1, 0x06]) + bytes(8) + bytes([0xda, 0x06, 0x02, 0x41, 0x42, 0xe5, 0x06]) + bytes(4)
        first = mp.pieces[0].SerializeToString() + unknown
        extended = bytes([0x0a, len(first)]) + first + b + unknown
        want = theirs(pb, extended)
        check(want is not None and len(want) == len(mp.pieces) + 1, "protobuf reads the extended model")
        compare("unknown fields", ours(args.gemmakit, extended, work), want)

        # Decoding corner cases, raw bytes: a repeated field's last value wins, a type outside the
        # enum leaves the type as it was (proto2 keeps it aside), a type varint keeps its low 32 bits.
        def varint(x):
            out = b""
            while True:
                low, x = x & 0x7F, x >> 7
                out += bytes([low | (0x80 if x else 0)])
                if not x:
                    return out
        pieces = [b"\x0a\x01x\x0a\x02xx\x18" + varint(3) + b"\x18" + varint(9),
                  b"\x0a\x01y\x18" + varint((1 << 32) | 5),
                  b"\x0a\x01z\x18" + varint((1 << 64) - 1), b""]
        corner = b"".join(b"\x0a" + varint(len(p)) + p for p in pieces)
        want = theirs(pb, corner)
        check(want is not None and [(w[0], w[2]) for w in want] == [(b"xx", 3), (b"y", 5), (b"z", 1), (b"", 1)],
              "protobuf reads the corner cases as expected: %r" % want)
        compare("corner cases", ours(args.gemmakit, corner, work), want)

        # Truncations: every refusal protobuf makes, and nothing more.
        b = trained["unigram"]
        points = sorted(set(range(1, len(b), max(1, len(b) // 150))) | {len(b) - 1})
        disagree = []
        for n in points:
            got, want = ours(args.gemmakit, b[:n], work), theirs(pb, b[:n])
            refused_here = not isinstance(got, list)
            refused_there = want is None or not want  # no pieces: gemmakit refuses, protobuf reads an empty model
            if refused_here != refused_there or (not refused_here and not same_pieces(got, want)):
                disagree.append(n)
            elif refused_here and not got.startswith("tokenizer.model: "):
                disagree.append(n)
        check(not disagree, "truncations at %s disagree with protobuf" % disagree[:5])
        print("%d truncations checked" % len(points))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
