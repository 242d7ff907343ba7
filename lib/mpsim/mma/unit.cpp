#include "mpsim/mma/unit.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "mpsim/error.hpp"

namespace mpsim::mma {
namespace {

enum class In : std::uint8_t { fp16, bf16, tf32, fp8, fp8_fnuz };

In input_kind(const Format& f) {
  if (f == fp16()) return In::fp16;
  if (f == bf16()) return In::bf16;
  if (f == tf32()) return In::tf32;
  if (f == fp8_e4m3() || f == fp8_e5m2()) return In::fp8;
  if (f == fp8_e4m3fnuz() || f == fp8_e5m2fnuz()) return In::fp8_fnuz;
  throw Error("mma: input format " + f.name +
              " is not one a matrix-unit model takes (fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz, "
              "fp8_e5m2fnuz)");
}

// Which GPU generation a model name means.
enum class Gen : std::uint8_t { volta, ampere, ada, hopper, blackwell, cdna1, cdna2, cdna3, exact_fp32, fp16_acc };

struct ModelName {
  const char* name;
  Gen gen;
  const char* recorded;  // the recording's folder (model_validation/<GPU>), "" for none (AMD: no recording)
};
constexpr ModelName kModels[] = {
    {"v100", Gen::volta, "V100"},    {"a100", Gen::ampere, "A100"},    {"a2", Gen::ampere, "A2"},
    {"ada", Gen::ada, "Ada"},        {"l40s", Gen::ada, "L40S"},       {"h100", Gen::hopper, "H100"},
    {"h200", Gen::hopper, "H200"},   {"b200", Gen::blackwell, "B200"}, {"mi100", Gen::cdna1, ""},
    {"mi250", Gen::cdna2, ""},       {"mi300x", Gen::cdna3, ""},       {"exact-fp32", Gen::exact_fp32, ""},
    {"fp16-acc", Gen::fp16_acc, ""},
};

[[noreturn]] void unsupported(std::string_view model, const Format& in, const Format& out, std::string_view takes) {
  throw Error(
      fmt::format("mma: model {} has no {} input with {} output (it takes {})", model, in.name, out.name, takes));
}

// A one-at-a-time accumulator that rounds exactly: one product per block, enough bits below the larger
// term and a sticky bit, so each step is c + a*b rounded once to nearest-even (an FMA).
BlockFma exact_step(const Format& out) {
  BlockFma b;
  b.products = 1;
  b.align_bits = 28;  // > every product's 2 * 10 fraction bits and fp32's 23 + 3 rounding bits
  b.sticky = true;
  b.exponent_floor = -100000;
  b.result_bits = out.man_bits;
  b.rounding = FinalRounding::nearest_even;
  return b;
}

}  // namespace

std::string_view to_string(FinalRounding r) { return r == FinalRounding::toward_zero ? "RZ" : "RNE"; }

std::string_view to_string(BlockStructure s) {
  switch (s) {
    case BlockStructure::aligned: return "aligned";
    case BlockStructure::exact: return "exact";
    case BlockStructure::pairwise_fp32: return "pairwise-fp32";
    case BlockStructure::late_accumulator: return "late-accumulator";
    case BlockStructure::odd_even: return "odd-even";
  }
  return "?";
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : kModels) v.emplace_back(m.name);
    return v;
  }();
  return names;
}

MatrixUnit matrix_unit(std::string_view model, const Format& input, const Format& output) {
  const ModelName* found = nullptr;
  for (const auto& m : kModels)
    if (model == m.name) found = &m;
  if (!found) {
    std::string list;
    for (const auto& n : model_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error(fmt::format("mma: unknown model '{}' (known: {})", model, list));
  }
  const bool out16 = output == fp16();
  if (!(output == fp32()) && !out16)
    throw Error(fmt::format("mma: output format {} is not one a matrix unit writes (fp32, fp16)", output.name));
  const bool cdna = found->gen == Gen::cdna1 || found->gen == Gen::cdna2 || found->gen == Gen::cdna3;
  MatrixUnit u;
  u.gpu = (found->recorded[0] || cdna) ? found->name : "";
  u.input = input;
  u.output = output;
  const In in = input_kind(input);
  if (in == In::fp8_fnuz && found->gen != Gen::cdna3)
    unsupported(model, input, output, "no fnuz fp8 input; those are mi300x's");
  if (cdna && out16) unsupported(model, input, output, "fp32 out only: the CDNA models write binary32");
  BlockFma& b = u.block;
  b.rounding = out16 ? FinalRounding::nearest_even : FinalRounding::toward_zero;
  b.result_bits = output.man_bits;
  // Parameters: Khattak & Mikaitis' models (models/<GPU>TC.m: fma = products, neab = align_bits - 23,
  // min_exp_limit = exponent_floor, frmode = rounding), except the fp8 instruction structures marked below.
  switch (found->gen) {
    case Gen::volta:  // V100TC.m
      if (in != In::fp16) unsupported(model, input, output, "fp16 in; fp16 or fp32 out");
      b.products = 4;
      b.align_bits = 23;
      b.exponent_floor = out16 ? -19 : -1024;
      break;
    case Gen::ampere:  // A100TC.m (A2TC.m calls it)
    case Gen::ada:     // AdaTC.m, L40STC.m
      if (in == In::fp8 && found->gen == Gen::ampere) unsupported(model, input, output, "fp16, bf16, tf32 in");
      if (out16 && in != In::fp16 && in != In::fp8)
        unsupported(model, input, output, "fp16 out only with fp16 or fp8 in");
      b.products = in == In::tf32 ? 4 : 8;
      b.align_bits = 24;
      b.exponent_floor = out16 ? -20 : -132;
      if (in == In::fp8) {  // AdaTC.m: fma 16, neab -10 (13 fraction bits kept), results of 13 bits in fp32
        b.products = 16;
        b.align_bits = 13;
        b.exponent_floor = -132;
        b.result_bits = out16 ? 10 : 13;
      }
      break;
    case Gen::hopper:     // H100TC.m (H200TC.m calls it)
    case Gen::blackwell:  // B200TC.m
      if (out16 && in != In::fp16 && in != In::fp8)
        unsupported(model, input, output, "fp16 out only with fp16 or fp8 in");
      b.products = in == In::tf32 ? 8 : 16;
      b.align_bits = 25;
      b.exponent_floor = out16 ? -21 : -133;
      if (in == In::fp8 && found->gen == Gen::hopper && !out16) {
        // H100TC.m: one block of 32 products, neab -10, results of 13 fraction bits (recorded with C = 0:
        // wgmma's D = A B; a non-zero C is the published model's, not confirmed by the recordings). This is
        // wgmma's fp8 path: mma.sync m16n8k32 fp8 on sm_90 runs as two fp16 HMMAs and computed, on an H200,
        // what the b200 unit below computes, every element (docs/hardware.md).
        b.products = 32;
        b.align_bits = 13;
        b.result_bits = 13;
      } else if (in == In::fp8) {
        // Found from the recordings (docs/mma.md): the k32 instruction runs as two blocks of 16 products on
        // the fp16 path (Hopper fp16 output; Blackwell fp16 and fp32 output), chained from zero, their sum
        // added to C at the end and rounded once to nearest-even. Hopper and Blackwell with fp16 output put
        // products k with (k / 2) % 2 == g in block g; Blackwell with fp32 output matches every split tried
        // (halves, even/odd, pairs), so it takes the same one.
        u.instruction.k = 32;
        u.instruction.groups = 2;
        u.instruction.interleave = 2;
        u.instruction.end_rounding = FinalRounding::nearest_even;
        u.instruction.block_output = output;
        b.products = 16;
      }
      break;
    // AMD CDNA: the published models (models/MI100MC.m, MI210MC.m, and MI300MC.m as of commit 0d3049f, deleted
    // from the repository since; line numbers of those files), all with binary32 output.
    case Gen::cdna1:  // MI100MC.m: fma 4 (2 for bf16, line 97), correct_rounding = 1 (line 75), subnormals kept
      if (in != In::fp16 && in != In::bf16) unsupported(model, input, output, "fp16, bf16 in");
      b.structure = BlockStructure::exact;
      b.products = in == In::bf16 ? 2 : 4;
      b.rounding = FinalRounding::nearest_even;
      b.align_bits = 0;          // unused: nothing is aligned away
      b.exponent_floor = -1024;  // min_exp_limit (line 68)
      break;
    case Gen::cdna2:  // MI210MC.m (MI250MC.m calls it): fma 4 for fp16 and bf16 (line 47), pair_wise_sum (line 65),
                      // in_subnormals = out_subnormals = 0 (lines 80, 83), final rounding RNE (line 52)
      if (in != In::fp16 && in != In::bf16) unsupported(model, input, output, "fp16, bf16 in");
      b.structure = BlockStructure::pairwise_fp32;
      b.products = 4;
      b.rounding = FinalRounding::nearest_even;
      b.align_bits = 0;
      b.exponent_floor = -1024;
      u.input_subnormals = false;
      u.output_subnormals = false;
      break;
    case Gen::cdna3:  // MI300MC.m (MI300XMC.m calls it): fma 8, neab 1, global alignment with late c, RNE
                      // (lines 51-65); tf32 fma 4 (line 96); fp8: fma 16, odd/even groups, fnuz inputs (99-102)
      if (in == In::fp8) unsupported(model, input, output, "fp16, bf16, tf32, fp8_e4m3fnuz, fp8_e5m2fnuz in");
      b.structure = in == In::fp8_fnuz ? BlockStructure::odd_even : BlockStructure::late_accumulator;
      b.products = in == In::fp8_fnuz ? 16 : in == In::tf32 ? 4 : 8;
      b.align_bits = 24;  // 23 + neab (line 52): AlignSignficand keeps 23 + neab bits below 2^E
      b.rounding = FinalRounding::nearest_even;
      b.exponent_floor = -1024;  // min_exp_limit (line 72)
      break;
    case Gen::exact_fp32:
      if (out16) unsupported(model, input, output, "fp32 out");
      u.block = exact_step(output);
      break;
    case Gen::fp16_acc:
      if (!out16) unsupported(model, input, output, "fp16 out");
      u.block = exact_step(output);
      break;
  }
  u.name = fmt::format("{}-{}-{}", found->name, input.name, output.name);
  if (found->recorded[0]) {
    // The folders the recordings hold for this GPU (model_validation/<GPU>/<format>/d_<GPU>_<out>.txt).
    const bool recorded = !(in == In::fp8 && found->gen == Gen::ampere) &&
                          !(found->gen == Gen::volta && in != In::fp16) &&
                          (!out16 || in == In::fp16 || (in == In::fp8 && std::string_view(found->name) != "l40s"));
    if (recorded) u.recorded = fmt::format("{}/{}", found->recorded, input.name);
  }
  validate(u);
  return u;
}

MatrixUnit parse_matrix_unit(std::string_view spec) {
  // "<model>" (fp16 in) or "<model>-<input>" with input fp16, bf16, tf32, fp8 (= fp8_e4m3; mi300x: fp8_e4m3fnuz),
  // or any format name;
  // output fp32 (fp16 for fp16-acc).
  for (const auto& m : kModels) {
    const std::string_view name = m.name;
    if (spec == name) return matrix_unit(name, fp16(), m.gen == Gen::fp16_acc ? fp16() : fp32());
    if (spec.size() > name.size() + 1 && spec.substr(0, name.size()) == name && spec[name.size()] == '-') {
      std::string_view in = spec.substr(name.size() + 1);
      const Format& input = in == "fp8" ? (m.gen == Gen::cdna3 ? fp8_e4m3fnuz() : fp8_e4m3()) : parse_format(in);
      return matrix_unit(name, input, m.gen == Gen::fp16_acc ? fp16() : fp32());
    }
  }
  return matrix_unit(spec, fp16(), fp32());  // throws the unknown-model error
}

void validate(const MatrixUnit& u) {
  const BlockFma& b = u.block;
  auto fail = [&](const std::string& what) { throw Error("mma: unit " + u.name + ": " + what); };
  if (b.products < 1 || b.products > 256) fail("products per block must be 1..256");
  if (b.align_bits < 0 || b.align_bits > 40) fail("align_bits must be 0..40 (the sum is held in 64 bits)");
  if (b.result_bits < 0 || b.result_bits > u.output.man_bits) fail("result_bits must be 0..the output's mantissa bits");
  if (u.input.man_bits > 10) fail("input mantissa wider than 10 bits (products must fit the aligned sum)");
  if (!u.output.has_inf || u.output.exp_bits > 8 || u.output.man_bits > 23)
    fail("output must be an IEEE format with inf no wider than fp32");
  if (u.instruction.k != 0 && u.instruction.k != u.instruction.groups * b.products)
    fail("an instruction's k must be groups x products per block");
  if (u.instruction.k != 0 && (u.instruction.interleave < 1 || u.instruction.groups < 1)) fail("bad instruction split");
  if (b.structure != BlockStructure::aligned && (!(u.output == fp32()) || u.instruction.k != 0))
    fail("the CDNA block structures need fp32 output and no instruction split");
  if (b.structure == BlockStructure::pairwise_fp32 && (b.products & (b.products - 1)) != 0)
    fail("a pairwise block halves its products: products must be a power of two");
  if ((b.structure == BlockStructure::late_accumulator || b.structure == BlockStructure::odd_even) &&
      b.align_bits < 2 * u.input.man_bits)
    fail("align_bits must keep every product's fraction bits (at least twice the input's mantissa bits)");
  if (u.promote_every < 0 || (u.promote_every > 0 && (u.promote_every % b.products != 0 || !(u.output == fp32()))))
    fail("promote_every must be a multiple of the block and needs fp32 output");
}

std::string describe(const MatrixUnit& u) {
  std::string s;
  switch (u.block.structure) {
    case BlockStructure::aligned:
      s = fmt::format(
          "{}: {} in, {} out, blocks of {} products, {} alignment bits{}, exponent floor {}, "
          "{} result bits, {}",
          u.name, u.input.name, u.output.name, u.block.products, u.block.align_bits, u.block.sticky ? " + sticky" : "",
          u.block.exponent_floor, u.block.result_bits, to_string(u.block.rounding));
      break;
    case BlockStructure::exact:
      s = fmt::format("{}: {} in, {} out, blocks of {} products summed exactly with c, {}", u.name, u.input.name,
                      u.output.name, u.block.products, to_string(u.block.rounding));
      break;
    case BlockStructure::pairwise_fp32:
      s = fmt::format("{}: {} in, {} out, blocks of {} products rounded to fp32 and summed pairwise in fp32, + c, {}",
                      u.name, u.input.name, u.output.name, u.block.products, to_string(u.block.rounding));
      break;
    case BlockStructure::late_accumulator:
    case BlockStructure::odd_even:
      s = fmt::format(
          "{}: {} in, {} out, blocks of {} products{} aligned with {} bits, c added late with round-down "
          "alignment, {}",
          u.name, u.input.name, u.output.name, u.block.products,
          u.block.structure == BlockStructure::odd_even ? " in even/odd groups" : "", u.block.align_bits,
          to_string(u.block.rounding));
      break;
  }
  if (!u.input_subnormals) s += "; subnormal inputs read as zero";
  if (!u.output_subnormals) s += "; subnormal results flushed";
  if (u.instruction.k)
    s += fmt::format(
        "; instructions of {} products as {} blocks (interleave {}) chained from zero, + C at the end ({})",
        u.instruction.k, u.instruction.groups, u.instruction.interleave, to_string(u.instruction.end_rounding));
  if (u.promote_every) s += fmt::format("; promoted to an fp32 accumulator every {}", u.promote_every);
  s += u.recorded.empty()
           ? (u.block.structure == BlockStructure::aligned
                  ? "; no recording checks this unit"
                  : "; the published CDNA model's, checked against that model's outputs only, no AMD hardware data")
           : "; checked against the recording " + u.recorded + (u.promote_every ? " (not the promotion)" : "");
  return s;
}

}  // namespace mpsim::mma
