#pragma once
// The message of the nmt::Error that `f` throws, or "" when it throws none: what the refusal
// tests compare against the field a message must name.
#include <string>

#include "model/error.h"

namespace nmt::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nmt::test
