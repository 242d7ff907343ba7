// mpsim gemm --model h100 --in fp8_e4m3 --out fp32 A.npy B.npy [C.npy] D.npy: D = C + A B as a matrix unit
// adds (lib/mpsim/mma, docs/mma.md). A (M x K), B (K x N), C (M x N, optional) are float .npy arrays (any
// float dtype, or the bits of --in's format under its ml_dtypes dtype); D is written as float32.
// Values not in the formats are rounded first, to nearest-even (A and B to --in, C to --out), as the
// published GEMM.m rounds its inputs with CPFloat; the summary says how many changed.
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/mma/dot.hpp"
#include "npy_input.hpp"

namespace {

struct Matrix {
  std::vector<double> values;
  std::int64_t rows = 0, cols = 0;
};

Matrix read_matrix(const std::string& path, const char* role) {
  const auto src = mpsim::cli::open_npy(path);
  const auto& t = src.tensors().front();
  if (t.shape.size() != 2)
    throw mpsim::Error(
        fmt::format("{}: {} must be a 2-d array, got shape {}", path, role, mpsim::io::shape_string(t.shape)));
  if (!mpsim::io::is_float(t.dtype) && !mpsim::io::is_opaque(t.dtype))
    throw mpsim::Error(
        fmt::format("{}: {} must hold floating-point values, got {}", path, role, mpsim::io::to_string(t.dtype)));
  return {src.read_double(t), t.shape[0], t.shape[1]};
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("gemm", "D = C + A B as a GPU matrix unit adds (tensor-core models, docs/mma.md)");
  struct Opts {
    std::string model, in = "fp16", out = "fp32";
    std::vector<std::string> files;
    int threads = 0;
    int promote = 0;
  };
  auto o = std::make_shared<Opts>();
  std::string models;
  for (const auto& m : mpsim::mma::model_names()) models += (models.empty() ? "" : ", ") + m;
  cmd->add_option("--model", o->model, "The matrix unit: " + models)->required();
  cmd->add_option("--in", o->in,
                  "Format of A and B (fp16, bf16, tf32, fp8_e4m3, fp8_e5m2; mi300x: fp8_e4m3fnuz, fp8_e5m2fnuz)");
  cmd->add_option("--out", o->out, "Format of C and D (fp32, fp16)");
  cmd->add_option("--promote-every", o->promote,
                  "Add the unit's partial sums into an fp32 accumulator every N elements of K (split accumulation)");
  cmd->add_option("--threads", o->threads, "Worker threads (0: all)");
  cmd->add_option("files", o->files, "A.npy B.npy [C.npy] D.npy")->required()->expected(3, 4);
  cmd->callback([o] {
    mpsim::mma::MatrixUnit unit =
        mpsim::mma::matrix_unit(o->model, mpsim::parse_format(o->in), mpsim::parse_format(o->out));
    if (o->promote) {
      unit.promote_every = o->promote;
      mpsim::mma::validate(unit);
    }
    const bool has_c = o->files.size() == 4;
    Matrix A = read_matrix(o->files[0], "A"), B = read_matrix(o->files[1], "B");
    if (A.cols != B.rows)
      throw mpsim::Error(
          fmt::format("{} and {}: shapes ({}, {}) and ({}, {}) do not multiply (A's columns must equal B's rows)",
                      o->files[0], o->files[1], A.rows, A.cols, B.rows, B.cols));
    Matrix C;
    if (has_c) {
      C = read_matrix(o->files[2], "C");
      if (C.rows != A.rows || C.cols != B.cols)
        throw mpsim::Error(
            fmt::format("{}: C has shape ({}, {}) but A B is ({}, {})", o->files[2], C.rows, C.cols, A.rows, B.cols));
    }
    const std::size_t ra = mpsim::mma::round_to_format(A.values, unit.input);
    const std::size_t rb = mpsim::mma::round_to_format(B.values, unit.input);
    const std::size_t rc = has_c ? mpsim::mma::round_to_format(C.values, unit.output) : 0;
    const auto M = static_cast<std::size_t>(A.rows), N = static_cast<std::size_t>(B.cols),
               K = static_cast<std::size_t>(A.cols);
    std::vector<double> D(M * N);
    mpsim::mma::gemm(unit, M, N, K, A.values.data(), B.values.data(), has_c ? C.values.data() : nullptr, D.data(),
                     o->threads);
    const std::vector<float> out(D.begin(), D.end());  // every output-format value is a float
    mpsim::io::write_npy(o->files.back(), mpsim::io::make_npy(out, {A.rows, B.cols}));
    fmt::print("{}\n", mpsim::mma::describe(unit));
    fmt::print("D ({}, {}) written to {}; rounded to the formats first: {} of A, {} of B, {} of C\n", M, N,
               o->files.back(), ra, rb, rc);
  });
}

const bool registered = mpsim::cli::register_command("gemm", setup);

}  // namespace
