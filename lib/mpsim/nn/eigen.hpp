// Row-major Eigen maps over plain buffers: the layers take pointers and sizes (llm.c style) and view
// them as matrices here. Eigen's products are kept single-threaded (EIGEN_DONT_PARALLELIZE, also set
// for every user of mpsim_nn_dep in meson.build, so that an OpenMP build elsewhere cannot change it):
// every product is computed in one fixed order and the bits do not depend on the thread count.
#pragma once

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
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
