// Matrix-unit (tensor-core) models: how a GPU's matrix instruction adds a block of products and an
// accumulator (docs/design.md, "mma/"). The structure follows Fasi, Higham, Mikaitis & Pranesh, "Numerical
// behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330 (2021), and the parameters of Khattak &
// Mikaitis, "Accurate Models of NVIDIA Tensor Cores" (ACM TACO, arXiv 2512.07004) with their MATLAB models
// (github.com/north-numerical-computing/MATLAB-tensor-core, models/*.m, models/tools/Generic_BFMA_TC.m).
//
// One block FMA, d = c + sum_i a_i b_i over `products` terms:
//  1. every product is exact; its exponent is e_a + e_b with e_x = max(floor(log2|x|), emin of the input
//     format), so a product's significand lies in [0, 4) (no normalisation of the products);
//     c's exponent is max(floor(log2|c|), -126) (the fp32 accumulator register);
//  2. E = the largest exponent of the non-zero terms (c included), never below `exponent_floor`;
//  3. every term's magnitude is truncated to a multiple of 2^(E - align_bits) (no rounding, no sticky
//     bit unless `sticky`), then the signed terms are added exactly (the carries are never lost);
//  4. the sum is normalised once and rounded to `result_bits` fraction bits within the output format's
//     exponent range, toward zero or to nearest-even; a result beyond the output's range is ±inf.
// Blocks chain along K: each block's result, in the output format, is the next block's c.
//
// AMD's CDNA matrix cores (MI100, MI250, MI300X) follow the published CDNA models of the same repository
// (models/MI100MC.m, MI210MC.m, MI300MC.m at commit 0d3049f; structures below), which add differently:
// no AMD hardware result checks them (docs/mma.md).
//
// Hopper and Blackwell run fp8 with fp16 output, and Blackwell fp8 with fp32 output, as two fp16-path
// blocks of 16 products whose sum is added to C at the end (Instruction below): a structure found from
// the recorded results (docs/mma.md), which the published models do not have. Hopper's fp8 with fp32
// output is wgmma's path; mma.sync fp8 on an H200 computed the b200 unit's structure instead, and WMMA's
// tf32 16x16x8 shape adds blocks of 4 products, not the 8 of the tf32 unit (docs/hardware.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/format/format.hpp"

namespace mpsim::mma {

enum class FinalRounding : std::uint8_t { toward_zero, nearest_even };
std::string_view to_string(FinalRounding);

// How a block adds its products and c. `aligned` is the NVIDIA structure above (every field of BlockFma
// applies); the others are the CDNA models of Generic_BFMA_TC.m (commit 0d3049f, line numbers of that file):
//  exact:            the products and c summed exactly, rounded once to nearest-even (correct_rounding = 1,
//                    Kulisch_Accumulation, lines 150-159; MI100MC.m);
//  pairwise_fp32:    each product rounded to fp32, the block summed as a pairwise tree of fp32 additions
//                    (nearest-even), then c + that sum rounded once (pws_main / pws_fma, lines 352-385 and
//                    463-483; MI210MC.m); results below fp32's normal range are flushed when output_subnormals
//                    is false;
//  late_accumulator: the products aligned to their largest exponent and truncated (align_bits, no c), then c
//                    added: the smaller of the two aligned to the larger with round-toward-minus-infinity, the
//                    product sum with 7 more bits when c is larger; one rounding to nearest-even (global
//                    alignment with late_partial_sum, lines 175-218, AddTwoNonNormSums, lines 511-580;
//                    MI300MC.m for fp16, bf16, tf32);
//  odd_even:         as late_accumulator, but the products at even and at odd positions aligned as two
//                    groups whose sums are added with round-toward-minus-infinity first; c's alignment
//                    truncates instead when c lies more than 25 binades below (odd_even_grouping, lines
//                    221-258; MI300MC.m for fp8).
// The CDNA2 and CDNA3 models also return ±inf (NaN for both signs) when a product reaches 2^128
// (prd_limit, lines 92-104).
enum class BlockStructure : std::uint8_t { aligned, exact, pairwise_fp32, late_accumulator, odd_even };
std::string_view to_string(BlockStructure);

// One fused block: aligned, truncated, added, normalised and rounded once.
struct BlockFma {
  int products = 16;          // products fused per normalisation (the "FMA size")
  int align_bits = 25;        // fraction bits kept below 2^E in the alignment: 23 + the model's extra bits
  bool sticky = false;        // OR the bits a term loses into its last kept bit (an adder that rounds exactly)
  int exponent_floor = -133;  // E never goes below this (min_exp_limit of the MATLAB models)
  int result_bits = 23;       // fraction bits of the normalised result (13 for fp8 on Ada and H100)
  FinalRounding rounding = FinalRounding::toward_zero;
  BlockStructure structure = BlockStructure::aligned;
};

// How one instruction splits its products (0 = a plain chain of blocks along K).
struct Instruction {
  int k = 0;           // products per instruction; 0: no split, blocks chain with c entering the first
  int groups = 2;      // the instruction's products go to `groups` blocks, chained from zero
  int interleave = 2;  // product k of an instruction goes to group (k / interleave) % groups
  // The chained blocks' sum (in the block's output format) is added to C exactly and rounded once to the
  // output format by this mode.
  FinalRounding end_rounding = FinalRounding::nearest_even;
  Format block_output;  // the format the blocks' chain is held in (fp16 or fp32)
};

struct MatrixUnit {
  std::string name;  // "h100-fp8_e4m3-fp32", "exact-fp32", ...
  std::string gpu;   // "h100", or "" for the reference units
  Format input;      // A and B hold values of this format
  Format output;     // C and D
  BlockFma block;
  Instruction instruction;
  bool input_subnormals = true;   // false: subnormal inputs are read as zero
  bool output_subnormals = true;  // false: subnormal results become zero
  // Every `promote_every` elements of K (a multiple of the block, 0 = never), the chain restarts from zero
  // and its result is added to an fp32 accumulator with round-to-nearest-even (split accumulation:
  // DeepSeek-V3 §3.3.2 promotes H800 fp8 partial sums to CUDA cores every 128 elements). Needs fp32 output.
  int promote_every = 0;
  // The recording that checks this unit, data/mma/recorded/ ("H100/fp8_e4m3"; "" when none does).
  std::string recorded;
};

// The GPUs with models ("v100", "a100", "a2", "ada", "l40s", "h100", "h200", "b200", and AMD's "mi100", "mi250",
// "mi300x" from the published CDNA models) and the reference units:
//  "exact-fp32": products exact, accumulated one at a time in fp32 with round-to-nearest-even (an fp32 FMA
//                chain: what a CPU loop with fmaf computes);
//  "fp16-acc":   the same with an fp16 accumulator (mixed-fp16-acc16 of the simulator).
const std::vector<std::string>& model_names();

// The unit of `model` for inputs in `input` and results in `output`. Throws mpsim::Error naming the model
// and listing the known ones, or naming the formats the model takes.
MatrixUnit matrix_unit(std::string_view model, const Format& input, const Format& output);

// Shorthands for the command line: "h100-fp8" (= fp8_e4m3 in, fp32 out), "h100-fp16", "h100-bf16",
// "h100-tf32", "h100-fp8_e5m2", or a plain model name with the formats given. On "mi300x", whose fp8 inputs
// are the fnuz formats, "fp8" means fp8_e4m3fnuz.
MatrixUnit parse_matrix_unit(std::string_view spec);

// Validates a hand-built unit (block sizes, bit counts, formats); throws mpsim::Error.
void validate(const MatrixUnit&);

// "block 16, 25 alignment bits, RZ, fp32 out, ..." for reports.
std::string describe(const MatrixUnit&);

}  // namespace mpsim::mma
