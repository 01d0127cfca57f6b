#include "server/observability/trace_context.h"

#include <cstdio>
#include <random>

namespace nmt::server {
namespace {

constexpr size_t kVersion00Length = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2

bool lower_hex(const std::string& s, size_t from, size_t count) {
  for (size_t i = from; i < from + count; ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool all_zeros(const std::string& s, size_t from, size_t count) {
  return s.find_first_not_of('0', from) >= from + count;
}

}  // namespace

bool valid_traceparent(const std::string& h) {
  if (h.size() < kVersion00Length) return false;
  if (h[2] != '-' || h[35] != '-' || h[52] != '-') return false;
  if (!lower_hex(h, 0, 2) || h.compare(0, 2, "ff") == 0) return false;
  if (!lower_hex(h, 3, 32) || all_zeros(h, 3, 32)) return false;
  if (!lower_hex(h, 36, 16) || all_zeros(h, 36, 16)) return false;
  if (!lower_hex(h, 53, 2)) return false;
  // Version 00 has nothing after the flags; a later version may append fields.
  if (h.compare(0, 2, "00") == 0) return h.size() == kVersion00Length;
  return h.size() == kVersion00Length || h[kVersion00Length] == '-';
}

std::string accept_traceparent(const std::string& header) {
  if (valid_traceparent(header)) return header;
  thread_local std::mt19937_64 random{std::random_device{}()};
  uint64_t trace_high = 0, trace_low = 0, parent = 0;
  while (trace_high == 0 && trace_low == 0) trace_high = random(), trace_low = random();
  while (parent == 0) parent = random();
  char out[kVersion00Length + 1];
  std::snprintf(out, sizeof out, "00-%016llx%016llx-%016llx-00",
                static_cast<unsigned long long>(trace_high),
                static_cast<unsigned long long>(trace_low), static_cast<unsigned long long>(parent));
  return out;
}

}  // namespace nmt::server
