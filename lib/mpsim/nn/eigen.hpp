// Row-major Eigen maps over plain buffers: the layers take pointers and sizes (llm.c style) and view
// them as matrices here. Eigen runs single-threaded in this project (mpsim_nn is built without OpenMP),
// so every product is computed in one fixed order: the bits do not depend on the thread count.
#pragma once

#include <Eigen/Core>

namespace mpsim::nn {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<Mat<T>>;
template <class T>
using CMatMap = Eigen::Map<const Mat<T>>;
template <class T>
using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <class T>
using CVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

}  // namespace mpsim::nn
