// A small English corpus for training the byte-level BPE of generated demo models.
#pragma once

#include <string>
#include <vector>

namespace millipede {

std::vector<std::string> DemoCorpus();

}  // namespace millipede
