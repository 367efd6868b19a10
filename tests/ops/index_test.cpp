// Joining and indexing operators: cat, stack, index_select, gather, scatter*, embedding,
// masked_fill, one_hot, plus allclose / equal. Table entries (with float64 references over the
// index values) and tests for errors, promotion, in-place variants and the parallel paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/op_table.h"

namespace loom::testing {
namespace {

const std::vector<DType> kCopyTypes = {kFloat32, kFloat64, kInt64, kFloat16, kBFloat16};

// Small integers (exact in every dtype), deterministic per seed.
Tensor values(std::vector<int64_t> shape, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-5, 5);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = dt == kBool ? (dist(rng) > 0) : dist(rng);
  return from_vector<double>(v, shape).to(dt);
}
Tensor longs(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return from_vector<int64_t>(v, shape);
}
Tensor longs(std::vector<int64_t> v) {
  return from_vector<int64_t>(v);
}

size_t at(int64_t i) {
  return static_cast<size_t>(i);
}

// ---- references ----

Ref ref_cat(const std::vector<Ref>& in, int64_t dim) {
  std::vector<const Ref*> parts;
  for (const Ref& r : in) {
    if (!(r.dim() == 1 && r.shape[0] == 0)) parts.push_back(&r);
  }
  if (parts.empty()) return Ref({0}, {});
  const int64_t nd = parts[0]->dim();
  if (dim < 0) dim += nd;
  std::vector<int64_t> shape = parts[0]->shape;
  shape[at(dim)] = 0;
  for (const Ref* r : parts) shape[at(dim)] += r->shape[at(dim)];
  Ref out = Ref::filled(shape, 0);
  int64_t base = 0;
  for (const Ref* r : parts) {
    for (int64_t i = 0; i < r->numel(); ++i) {
      auto c = r->coords(i);
      c[at(dim)] += base;
      out.at(c) = r->v[at(i)];
    }
    base += r->shape[at(dim)];
  }
  return out;
}

Ref ref_index_select(const Ref& self, int64_t dim, const Ref& index) {
  std::vector<int64_t> shape = self.shape;
  shape[at(dim)] = index.numel();
  Ref out = Ref::filled(shape, 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto c = out.coords(i);
    c[at(dim)] = static_cast<int64_t>(index.v[at(c[at(dim)])]);
    out.v[at(i)] = self.at(c);
  }
  return out;
}

Ref ref_gather(const Ref& self, int64_t dim, const Ref& index) {
  Ref out = Ref::filled(index.shape, 0);
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto c = index.coords(i);
    c[at(dim)] = static_cast<int64_t>(index.v[at(i)]);
    out.v[at(i)] = self.at(c);
  }
  return out;
}

// kind: 0 = scatter src, 1 = scatter value (src unused), 2 = scatter_add.
Ref ref_scatter(const Ref& self, int64_t dim, const Ref& index, const Ref* src, double value,
                int kind) {
  Ref out = self;
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto c = index.coords(i);
    const double s = kind == 1 ? value : src->at(c);
    c[at(dim)] = static_cast<int64_t>(index.v[at(i)]);
    if (kind == 2)
      out.at(c) += s;
    else
      out.at(c) = s;
  }
  return out;
}

// ---- table ----

OpCase cat_case(const std::string& name, std::vector<std::vector<int64_t>> shapes, int64_t dim) {
  OpCase c;
  c.name = name;
  c.shapes = std::move(shapes);
  c.dtypes = {kFloat32, kFloat64, kInt64, kFloat16, kBool};
  c.run = [dim](const std::vector<Tensor>& in) { return one(cat(in, dim)); };
  c.ref = [dim](const std::vector<Ref>& in) { return one(ref_cat(in, dim)); };
  return c;
}

OpCase index_case(const std::string& name, std::function<std::vector<Tensor>(DType)> inputs,
                  std::function<Tensor(const std::vector<Tensor>&)> run,
                  std::function<Ref(const std::vector<Ref>&)> ref,
                  std::vector<DType> dtypes = kCopyTypes) {
  OpCase c;
  c.name = name;
  c.dtypes = std::move(dtypes);
  c.make_inputs = std::move(inputs);
  c.run = [run](const std::vector<Tensor>& in) { return one(run(in)); };
  c.ref = [ref](const std::vector<Ref>& in) { return one(ref(in)); };
  return c;
}

const RegisterOpCases kIndexCases({
    cat_case("cat/dim0", {{2, 3}, {4, 3}, {1, 3}}, 0),
    cat_case("cat/dim1", {{2, 3}, {2, 1}, {2, 4}}, 1),
    cat_case("cat/neg_dim", {{2, 3, 2}, {2, 3, 5}}, -1),
    cat_case("cat/legacy_empty", {{0}, {2, 3}, {0}, {1, 3}}, 0),
    cat_case("cat/zero_size", {{2, 0}, {2, 3}}, 1),
    [] {
      OpCase c = cat_case("stack/dim1", {{2, 3}, {2, 3}, {2, 3}}, 1);
      c.run = [](const std::vector<Tensor>& in) { return one(stack(in, 1)); };
      c.ref = [](const std::vector<Ref>& in) {
        std::vector<Ref> parts;
        for (Ref r : in) {
          r.shape.insert(r.shape.begin() + 1, 1);
          parts.push_back(r);
        }
        return one(ref_cat(parts, 1));
      };
      return c;
    }(),
    index_case(
        "index_select/dim0",
        [](DType dt) {
          return std::vector<Tensor>{values({5, 3}, dt, 1), longs({4, 0, 4, 2})};
        },
        [](const std::vector<Tensor>& in) { return index_select(in[0], 0, in[1]); },
        [](const std::vector<Ref>& in) { return ref_index_select(in[0], 0, in[1]); }),
    index_case(
        "index_select/dim1_int32",
        [](DType dt) {
          return std::vector<Tensor>{values({2, 4, 3}, dt, 2), from_vector<int32_t>({3, 1, 1})};
        },
        [](const std::vector<Tensor>& in) { return index_select(in[0], 1, in[1]); },
        [](const std::vector<Ref>& in) { return ref_index_select(in[0], 1, in[1]); }),
    index_case(
        "index_select/last_dim",
        [](DType dt) {
          return std::vector<Tensor>{values({3, 4}, dt, 3), longs({2, 0})};
        },
        [](const std::vector<Tensor>& in) { return index_select(in[0], -1, in[1]); },
        [](const std::vector<Ref>& in) { return ref_index_select(in[0], 1, in[1]); }),
    index_case(
        "gather/dim0",
        [](DType dt) {
          return std::vector<Tensor>{values({4, 3}, dt, 4), longs({3, 0, 1, 2, 2, 0}, {2, 3})};
        },
        [](const std::vector<Tensor>& in) { return gather(in[0], 0, in[1]); },
        [](const std::vector<Ref>& in) { return ref_gather(in[0], 0, in[1]); }),
    index_case(
        "gather/dim1_smaller_index",
        [](DType dt) {
          return std::vector<Tensor>{values({3, 5, 2}, dt, 5),
                                     longs({4, 0, 1, 1, 2, 3, 0, 0}, {2, 2, 2})};
        },
        [](const std::vector<Tensor>& in) { return gather(in[0], 1, in[1]); },
        [](const std::vector<Ref>& in) { return ref_gather(in[0], 1, in[1]); }),
    index_case(
        "scatter/src_dim0",
        [](DType dt) {
          return std::vector<Tensor>{values({4, 3}, dt, 6), longs({3, 0, 1, 1, 2, 0}, {2, 3}),
                                     values({3, 3}, dt, 7)};
        },
        [](const std::vector<Tensor>& in) { return scatter(in[0], 0, in[1], in[2]); },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 0, in[1], &in[2], 0, 0); }),
    index_case(
        "scatter/src_dim1",
        [](DType dt) {
          return std::vector<Tensor>{values({2, 5}, dt, 8), longs({4, 0, 2, 1, 3, 0}, {2, 3}),
                                     values({2, 4}, dt, 9)};
        },
        [](const std::vector<Tensor>& in) { return scatter(in[0], 1, in[1], in[2]); },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 1, in[1], &in[2], 0, 0); }),
    index_case(
        "scatter/value",
        [](DType dt) {
          return std::vector<Tensor>{values({3, 4}, dt, 10), longs({1, 3, 0, 2}, {2, 2})};
        },
        [](const std::vector<Tensor>& in) { return scatter(in[0], 1, in[1], Scalar(3)); },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 1, in[1], nullptr, 3, 1); }),
    index_case(
        "scatter/inplace",
        [](DType dt) {
          return std::vector<Tensor>{values({4, 2}, dt, 11), longs({2, 3, 0, 1}, {2, 2}),
                                     values({2, 2}, dt, 12)};
        },
        [](const std::vector<Tensor>& in) {
          Tensor self = in[0].clone();
          return scatter_(self, 0, in[1], in[2]);
        },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 0, in[1], &in[2], 0, 0); }),
    index_case(
        "scatter_add/duplicates_dim0",
        [](DType dt) {
          return std::vector<Tensor>{values({3, 4}, dt, 13),
                                     longs({0, 1, 2, 0, 0, 1, 2, 0, 0, 0, 0, 0}, {3, 4}),
                                     values({3, 4}, dt, 14)};
        },
        [](const std::vector<Tensor>& in) { return scatter_add(in[0], 0, in[1], in[2]); },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 0, in[1], &in[2], 0, 2); }),
    index_case(
        "scatter_add/inplace_dim1",
        [](DType dt) {
          return std::vector<Tensor>{values({2, 3}, dt, 15),
                                     longs({2, 2, 0, 1, 1, 1, 0, 0}, {2, 4}),
                                     values({2, 5}, dt, 16)};
        },
        [](const std::vector<Tensor>& in) {
          Tensor self = in[0].clone();
          return scatter_add_(self, 1, in[1], in[2]);
        },
        [](const std::vector<Ref>& in) { return ref_scatter(in[0], 1, in[1], &in[2], 0, 2); }),
    index_case(
        "embedding",
        [](DType dt) {
          return std::vector<Tensor>{values({5, 3}, dt, 17), longs({4, 0, 2, 2, 1, 3}, {2, 3})};
        },
        [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); },
        [](const std::vector<Ref>& in) {
          Ref flat = in[1];
          flat.shape = {flat.numel()};
          Ref r = ref_index_select(in[0], 0, flat);
          r.shape = {2, 3, 3};
          return r;
        }),
    index_case(
        "masked_fill/broadcast",
        [](DType dt) {
          return std::vector<Tensor>{values({3, 4}, dt, 18), values({4}, kBool, 19)};
        },
        [](const std::vector<Tensor>& in) { return masked_fill(in[0], in[1], -7); },
        [](const std::vector<Ref>& in) {
          return ref_map2(in[0], in[1], [](double x, double m) { return m != 0 ? -7.0 : x; });
        }),
    index_case(
        "masked_fill/mask_grows_result",
        [](DType dt) {
          return std::vector<Tensor>{values({4}, dt, 20), values({2, 4}, kBool, 21)};
        },
        [](const std::vector<Tensor>& in) { return masked_fill(in[0], in[1], 2); },
        [](const std::vector<Ref>& in) {
          return ref_map2(in[0], in[1], [](double x, double m) { return m != 0 ? 2.0 : x; });
        }),
    index_case(
        "masked_fill/inplace",
        [](DType dt) {
          return std::vector<Tensor>{values({2, 3}, dt, 22), values({2, 1}, kBool, 23)};
        },
        [](const std::vector<Tensor>& in) {
          Tensor self = in[0].clone();
          return masked_fill_(self, in[1], 1);
        },
        [](const std::vector<Ref>& in) {
          return ref_map2(in[0], in[1], [](double x, double m) { return m != 0 ? 1.0 : x; });
        }),
    [] {
      OpCase c = index_case(
          "one_hot/explicit_classes",
          [](DType) {
            return std::vector<Tensor>{longs({2, 0, 1, 2, 0, 0}, {2, 3})};
          },
          [](const std::vector<Tensor>& in) { return one_hot(in[0], 4); },
          [](const std::vector<Ref>& in) {
            std::vector<int64_t> shape = in[0].shape;
            shape.push_back(4);
            Ref r = Ref::filled(shape, 0);
            for (int64_t i = 0; i < in[0].numel(); ++i)
              r.v[at(i * 4 + static_cast<int64_t>(in[0].v[at(i)]))] = 1;
            return r;
          },
          {kInt64});
      c.exact_outputs = {0};
      return c;
    }(),
    [] {
      OpCase c = index_case(
          "one_hot/inferred",
          [](DType) {
            return std::vector<Tensor>{longs({1, 3, 0})};
          },
          [](const std::vector<Tensor>& in) { return one_hot(in[0]); },
          [](const std::vector<Ref>&) {
            return Ref({3, 4}, {0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0});
          },
          {kInt64});
      c.meta = false;  // the class count comes from the values, which Meta tensors lack
      c.exact_outputs = {0};
      return c;
    }(),
});

// ---- cat / stack ----

TEST(Index, CatPromotesAcrossInputs) {
  Tensor i = from_vector<int32_t>({1, 2}, {2});
  Tensor f = from_vector<float>({0.5f}, {1});
  Tensor r = cat({i, f});
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(to_vector<float>(r), (std::vector<float>{1, 2, 0.5f}));
  EXPECT_EQ(cat({from_vector<uint8_t>({1}), from_vector<int8_t>({-1})}).dtype(), kInt16);
  // A legacy empty tensor is skipped for shapes but still takes part in promotion.
  Tensor legacy = empty({0}, kFloat64);
  Tensor m = cat({legacy, from_vector<int64_t>({1, 2, 3, 4}, {2, 2})}, 1);
  EXPECT_EQ(m.dtype(), kFloat64);
  EXPECT_EQ(m.sizes().vec(), (std::vector<int64_t>{2, 2}));
  // Only legacy empties: a [0] tensor.
  EXPECT_EQ(cat({legacy, legacy}).sizes().vec(), (std::vector<int64_t>{0}));
}

TEST(Index, CatErrorsNameTensorDimAndShapes) {
  std::string m = error_of<ValueError>([] {
    cat({zeros({2, 3}), zeros({2, 4}), zeros({3, 4})}, 0);
  });
  EXPECT_NE(m.find("[cat]"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 1"), std::string::npos) << m;
  EXPECT_NE(m.find("dimension 1"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
  EXPECT_THROW(cat({zeros({2}), zeros({2, 1})}), ValueError);               // rank mismatch
  EXPECT_THROW(cat({scalar_tensor(1.0), scalar_tensor(2.0)}), ValueError);  // 0-dim
  EXPECT_THROW(cat(std::vector<Tensor>{}), ValueError);
  EXPECT_THROW(cat({zeros({2})}, 1), IndexError);
  std::string s = error_of<ValueError>([] { stack({zeros({2, 3}), zeros({3, 2})}); });
  EXPECT_NE(s.find("[stack]"), std::string::npos) << s;
  EXPECT_NE(s.find("entry 1"), std::string::npos) << s;
  EXPECT_EQ(stack({zeros({2}), ones({2})}, -1).sizes().vec(), (std::vector<int64_t>{2, 2}));
}

TEST(Index, CatLargeParallelMatchesReference) {
  Tensor a = values({300, 70}, kFloat32, 40), b = values({300, 50}, kFloat32, 41);
  Tensor c1 = cat({a, b}, 1);
  EXPECT_EQ(Ref::of(c1).v, ref_cat({Ref::of(a), Ref::of(b)}, 1).v);
  Tensor big = values({1 << 17}, kFloat32, 42), small = values({5}, kFloat32, 43);
  Tensor c0 = cat({big, small, big});
  EXPECT_EQ(Ref::of(c0).v, ref_cat({Ref::of(big), Ref::of(small), Ref::of(big)}, 0).v);
  // Mixed dtypes and a transposed input take the general path.
  Tensor t = values({70, 300}, kFloat64, 44).t();
  Tensor c2 = cat({a, t}, 1);
  EXPECT_EQ(c2.dtype(), kFloat64);
  EXPECT_EQ(Ref::of(c2).v, ref_cat({Ref::of(a), Ref::of(t)}, 1).v);
}

// ---- index errors ----

TEST(Index, OutOfRangeIsIndexErrorNamingValueDimAndSize) {
  Tensor x = values({5, 3}, kFloat32, 50);
  std::string m = error_of<IndexError>([&] { index_select(x, 0, longs({1, 7})); });
  EXPECT_NE(m.find("[index_select]"), std::string::npos) << m;
  EXPECT_NE(m.find("index 7"), std::string::npos) << m;
  EXPECT_NE(m.find("dimension 0"), std::string::npos) << m;
  EXPECT_NE(m.find("size 5"), std::string::npos) << m;
  EXPECT_THROW(index_select(x, 1, longs({-1})), IndexError);
  EXPECT_THROW(index_select(x, 2, longs({0})), IndexError);  // dim out of range
  EXPECT_THROW(embedding(x, longs({5})), IndexError);
  m = error_of<IndexError>([&] { gather(x, 1, longs({0, 3}, {1, 2})); });
  EXPECT_NE(m.find("[gather]"), std::string::npos) << m;
  EXPECT_NE(m.find("index 3"), std::string::npos) << m;
  EXPECT_NE(m.find("size 3"), std::string::npos) << m;
  EXPECT_THROW(scatter(x, 0, longs({9}, {1, 1}), Scalar(1)), IndexError);
  EXPECT_THROW(scatter_add(x, 0, longs({-2}, {1, 1}), x), IndexError);
}

TEST(Index, BadIndexLeavesDestinationUntouched) {
  Tensor x = zeros({4, 2});
  // The valid first indices must not be written before the bad last one is found.
  EXPECT_THROW(scatter_(x, 0, longs({0, 1, 2, 4}, {4, 1}), ones({4, 1})), IndexError);
  EXPECT_THROW(scatter_add_(x, 0, longs({0, 1, 2, 4}, {4, 1}), ones({4, 1})), IndexError);
  EXPECT_EQ(to_vector<float>(x), std::vector<float>(8, 0.0f));
}

TEST(Index, IndexDtypesFollowPyTorch) {
  Tensor x = values({4, 3}, kFloat32, 51);
  Tensor f = from_vector<float>({0, 1});
  Tensor i32 = from_vector<int32_t>({0, 3});
  EXPECT_THROW(index_select(x, 0, f), TypeError);
  EXPECT_NO_THROW(index_select(x, 0, i32));
  EXPECT_NO_THROW(embedding(x, i32));
  EXPECT_THROW(gather(x, 0, from_vector<int32_t>({0}, {1, 1})), TypeError);
  EXPECT_THROW(scatter(x, 0, from_vector<int32_t>({0}, {1, 1}), Scalar(1)), TypeError);
  EXPECT_THROW(one_hot(from_vector<int32_t>({1})), TypeError);
  EXPECT_THROW(masked_fill(x, zeros({3}), 1), TypeError);  // mask must be bool
  EXPECT_THROW(scatter(x, 0, longs({0}, {1, 1}), zeros({1, 1}, kFloat64)), TypeError);
  EXPECT_THROW(index_select(x, 0, longs({0, 1}, {1, 2})), IndexError);  // not a vector
}

TEST(Index, ShapeChecks) {
  Tensor x = zeros({3, 4});
  EXPECT_THROW(gather(x, 0, longs({0, 0, 0, 0, 0}, {1, 5})), ValueError);         // wider than self
  EXPECT_THROW(gather(x, 0, longs({0})), ValueError);                             // rank differs
  EXPECT_THROW(scatter(x, 0, longs({0, 0}, {1, 2}), zeros({1, 1})), ValueError);  // src too small
  EXPECT_THROW(embedding(zeros({3}), longs({0})), ValueError);
  // In place, the mask must broadcast to self's shape without growing it.
  EXPECT_THROW(masked_fill_(zeros({4}), from_vector<bool>({true, false}, {2, 1}), 1), ValueError);
}

TEST(Index, ZeroDimAndEmptyIndices) {
  Tensor x = from_vector<float>({1, 2, 3});
  Tensor r = index_select(x, 0, scalar_tensor(2, kInt64));
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{1}));
  EXPECT_EQ(r.item<float>(), 3.0f);
  Tensor s = index_select(scalar_tensor(5.0), 0, longs({0}));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 5.0f);
  EXPECT_EQ(index_select(x, 0, empty({0}, kInt64)).numel(), 0);
  EXPECT_EQ(gather(scalar_tensor(4.0), 0, scalar_tensor(0, kInt64)).item<float>(), 4.0f);
  Tensor e = embedding(zeros({4, 2}), empty({0, 3}, kInt64));
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{0, 3, 2}));
  EXPECT_EQ(scatter_add(x, 0, empty({0}, kInt64), x).sizes().vec(), x.sizes().vec());
}

TEST(Index, InPlaceReturnsSelfAndBumpsVersion) {
  Tensor x = zeros({3});
  uint32_t v = x.version();
  const Tensor& r = scatter_add_(x, 0, longs({1, 1}), ones({2}));
  EXPECT_TRUE(r.is_same(x));
  EXPECT_GT(x.version(), v);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{0, 2, 0}));
  v = x.version();
  masked_fill_(x, from_vector<bool>({true, false, false}), 9);
  EXPECT_GT(x.version(), v);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{9, 2, 0}));
  // Out-of-place variants leave self alone.
  scatter(x, 0, longs({2}), Scalar(5));
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{9, 2, 0}));
}

TEST(Index, OneHotErrors) {
  std::string m = error_of<IndexError>([] { one_hot(longs({0, 5}), 3); });
  EXPECT_NE(m.find("[one_hot]"), std::string::npos) << m;
  EXPECT_NE(m.find("5"), std::string::npos) << m;
  EXPECT_NE(m.find("3"), std::string::npos) << m;
  EXPECT_THROW(one_hot(longs({-1, 0})), IndexError);
  EXPECT_THROW(one_hot(empty({0}, kInt64)), ValueError);
  EXPECT_EQ(one_hot(empty({0}, kInt64), 3).sizes().vec(), (std::vector<int64_t>{0, 3}));
  Tensor r = one_hot(longs({2}));
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(to_vector<int64_t>(r), (std::vector<int64_t>{0, 0, 1}));
}

// ---- parallel paths against the references ----

TEST(Index, LargeIndexOpsMatchReference) {
  Tensor w = values({1000, 64}, kFloat32, 60);
  std::mt19937 rng(7);
  std::vector<int64_t> idx(5000);
  for (auto& i : idx) i = static_cast<int64_t>(rng() % 1000);
  Tensor ind = longs(idx);
  EXPECT_EQ(Ref::of(index_select(w, 0, ind)).v, ref_index_select(Ref::of(w), 0, Ref::of(ind)).v);
  EXPECT_EQ(Ref::of(index_select(w, 1, longs({63, 0, 5}))).v,
            ref_index_select(Ref::of(w), 1, Ref::of(longs({63, 0, 5}))).v);
  // scatter_add with many duplicates along dim 0 (rows along dim run in parallel).
  std::vector<int64_t> sidx(200 * 64);
  for (auto& i : sidx) i = static_cast<int64_t>(rng() % 7);
  Tensor si = longs(sidx, {200, 64});
  Tensor src = values({200, 64}, kFloat64, 61);
  Tensor base = zeros({7, 64}, kFloat64);
  const Ref src_ref = Ref::of(src);
  Ref want = ref_scatter(Ref::of(base), 0, Ref::of(si), &src_ref, 0, 2);
  EXPECT_EQ(Ref::of(scatter_add(base, 0, si, src)).v, want.v);
  Tensor g = gather(src, 0, si.narrow(0, 0, 50));
  EXPECT_EQ(Ref::of(g).v, ref_gather(Ref::of(src), 0, Ref::of(si.narrow(0, 0, 50))).v);
}

// ---- allclose / equal ----

TEST(Compare, AllcloseAndEqual) {
  Tensor a = from_vector<float>({1.0f, 2.0f, INFINITY});
  Tensor b = from_vector<float>({1.0f + 1e-6f, 2.0f, INFINITY});
  EXPECT_TRUE(allclose(a, b));
  EXPECT_FALSE(equal(a, b));
  EXPECT_TRUE(equal(a, a.clone()));
  EXPECT_FALSE(allclose(a, from_vector<float>({1.1f, 2.0f, INFINITY})));
  EXPECT_TRUE(allclose(a, from_vector<float>({1.1f, 2.0f, INFINITY}), 0.2));
  EXPECT_FALSE(allclose(a, from_vector<float>({1.0f, 2.0f, -INFINITY})));
  Tensor n = from_vector<float>({NAN});
  EXPECT_FALSE(allclose(n, n));
  EXPECT_TRUE(allclose(n, n, 1e-5, 1e-8, true));
  EXPECT_FALSE(equal(n, n));
  // allclose broadcasts; equal needs equal shapes.
  EXPECT_TRUE(allclose(from_vector<float>({2, 2, 2, 2}, {2, 2}), from_vector<float>({2})));
  EXPECT_FALSE(equal(from_vector<float>({2, 2}), from_vector<float>({2})));
  EXPECT_THROW(allclose(a, a.to(kFloat64)), TypeError);
  EXPECT_THROW(equal(a, a.to(kFloat64)), TypeError);
  EXPECT_TRUE(equal(longs({1, 2, 3, 4}, {2, 2}).t(), longs({1, 3, 2, 4}, {2, 2})));
  EXPECT_TRUE(equal(from_vector<float>({-0.0f}), from_vector<float>({0.0f})));
  Tensor big = values({100000}, kFloat32, 70);
  Tensor other = big.clone();
  EXPECT_TRUE(equal(big, other));
  other.narrow(0, 99999, 1).fill_(100);
  EXPECT_FALSE(equal(big, other));
  EXPECT_FALSE(allclose(big, other));
}

}  // namespace
}  // namespace loom::testing
