// A stable merge sort whose comparison may fail (Python's sort raises TypeError on 1 < 'a').
// std::stable_sort cannot stop on an error, and an inconsistent comparison must never crash, so
// the sort filters use this instead.
#pragma once

#include <algorithm>
#include <vector>

#include "util/result.h"

namespace gk::jinja {

// less(a, b) -> Result<bool>; stops at the first failed comparison.
template <class T, class Less>
Status StableSort(std::vector<T>& items, Less less) {
  std::vector<T> buffer(items.size());
  for (size_t width = 1; width < items.size(); width *= 2) {
    for (size_t lo = 0; lo < items.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, items.size());
      const size_t hi = std::min(lo + 2 * width, items.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        Result<bool> right_first = less(items[j], items[i]);
        if (!right_first.ok()) return right_first.status();
        buffer[k++] = *right_first ? items[j++] : items[i++];
      }
      while (i < mid) buffer[k++] = items[i++];
      while (j < hi) buffer[k++] = items[j++];
    }
    items.swap(buffer);
  }
  return Status::Ok();
}

}  // namespace gk::jinja
