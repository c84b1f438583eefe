// Feeds arbitrary bytes to the job spec parser: it must return a Status, never crash or hang.
// Seeds: tests/fuzz/corpus/job_spec_fuzz/ (the example configs and the malformed specs).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/job_spec.h"
#include "core/model_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<strait::JobSpec> spec = strait::ParseJobSpec(text, "fuzz.yaml", "/");
  // A spec that validates must also lay out (config check does this without further checks).
  if (spec.ok()) (void)strait::BuildModelLayout(spec->model);
  return 0;
}
