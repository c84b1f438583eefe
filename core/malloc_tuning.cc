#include "core/malloc_tuning.h"

#include <malloc.h>

namespace strait {

void KeepFreedMemoryForReuse() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace strait
