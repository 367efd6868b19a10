// OperatorEntry: one operator's schema and kernel tables (internal to the dispatch layer).
#pragma once

#include <array>
#include <optional>
#include <string>

#include "loom/dispatch.h"

namespace loom {

class OperatorEntry {
 public:
  explicit OperatorEntry(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  bool has_schema() const { return schema_.has_value(); }
  const FunctionSchema& schema() const;

  // Runtime table: the kernel to run for each key (direct > alias > backend fallback).
  std::array<KernelFunction, kNumDispatchKeys> table;
  // Keys whose table entry is not a fallthrough.
  DispatchKeySet non_fallthrough = DispatchKeySet::from_raw(~uint64_t{0});

  std::optional<FunctionSchema> schema_;
  std::string schema_debug_;
  // Directly registered kernels: runtime keys plus the two alias keys at the end.
  static constexpr int kCompositeExplicitSlot = kNumDispatchKeys;
  static constexpr int kCompositeImplicitSlot = kNumDispatchKeys + 1;
  std::array<std::optional<KernelFunction>, kNumDispatchKeys + 2> registered;

 private:
  std::string name_;
};

}  // namespace loom
