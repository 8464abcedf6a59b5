// Writes the attention fuzzer's seed corpus: every CPU matrix case that read_case can express,
// one file per case (named after it), so that fuzzing starts from the cases the project
// already knows to matter (DESIGN.md §4) and mutates outward from them.
//   pagedattn_fuzz_seeds DIR [MAX]   (MAX: at most this many files, spread over the matrix)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "fuzz/case_codec.h"

int main(int argc, char** argv) {
  using namespace pagedattn;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [MAX]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const auto cases = testing::matrix_cases(Device::cpu());
  std::vector<std::pair<std::string, std::vector<std::uint8_t>>> seeds;
  std::map<std::string, int> skipped;  // field -> cases it kept out
  for (const auto& c : cases) {
    fuzz::ByteWriter w;
    w.pick(0);  // mode 0: a whole case (fuzz_attention.cpp)
    if (const char* field = fuzz::write_case(c, w)) {
      ++skipped[field];
      continue;
    }
    // The round trip must give the case back, or the seed would not be the case it is named after.
    fuzz::ByteReader r(w.bytes().data(), w.bytes().size());
    r.pick(8);
    const auto back = fuzz::read_case(r);
    testing::CaseConfig unnamed = c;  // the name is a label, not part of the input
    unnamed.name.clear(), unnamed.tag.clear();
    if (!back || testing::case_name(*back) != testing::case_name(unnamed)) {
      std::fprintf(stderr, "make_seeds: %s does not round-trip\n", testing::case_name(c).c_str());
      return 1;
    }
    seeds.emplace_back(testing::case_name(unnamed), w.bytes());
  }
  const std::size_t max = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : seeds.size();
  const std::size_t step = seeds.size() > max && max > 0 ? (seeds.size() + max - 1) / max : 1;
  std::size_t written = 0;
  for (std::size_t i = 0; i < seeds.size(); i += step, ++written) {
    std::ofstream f(dir + "/" + seeds[i].first, std::ios::binary);
    f.write(reinterpret_cast<const char*>(seeds[i].second.data()),
            static_cast<std::streamsize>(seeds[i].second.size()));
    if (!f) {
      std::fprintf(stderr, "make_seeds: cannot write %s/%s\n", dir.c_str(), seeds[i].first.c_str());
      return 1;
    }
  }
  std::printf("make_seeds: %zu of %zu matrix cases expressible, %zu written to %s\n", seeds.size(),
              cases.size(), written, dir.c_str());
  for (const auto& [field, n] : skipped) std::printf("  %d kept out by %s\n", n, field.c_str());
  return 0;
}
