#include "models/demo_corpus.h"

namespace millipede {

// Written for this project: plain prose about the service's own domain, so that common English
// words and the vocabulary of prompts in examples become single tokens.
std::vector<std::string> DemoCorpus() {
  return {
      "Millipede is a service for very long prompts. A coordinator accepts a job, cuts the "
      "prompt into shards and hands each shard to a worker. Every worker owns one graphics "
      "processor and computes the part of the attention that belongs to its tokens.",
      "The quick brown fox jumps over the lazy dog. The dog does not mind; it has seen the fox "
      "jump many times before, and it will see the fox jump again tomorrow.",
      "When the prompt is a million tokens long, the keys and values of every layer no longer "
      "fit on one device. The workers pass their keys and values around a ring, and each one "
      "merges the partial results with the log-sum-exp rule, so the answer is exact.",
      "Once upon a time there was a small town by the sea. The people of the town were "
      "fishermen and bakers, teachers and sailors. In the morning they went to work, and in "
      "the evening they came home and told each other stories about the day.",
      "Numbers matter: 1, 2, 3, 10, 42, 100, 2024, 65536 and 1048576 are all numbers that "
      "appear in logs, in tables and in the answers of a model.",
      "Hello, world! How are you today? I am fine, thank you. What would you like to know about "
      "the weather, the news, or the history of computing?",
      "Sparse attention keeps only the columns and diagonals that matter. Filter layers choose "
      "the tokens for the layers that follow them, and the rest of the cache waits in host "
      "memory until it is needed.",
      "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i))\n",
      "The answer to the question is in the text. Read the text, find the key, and say the "
      "value that belongs to it. If there is no such key, say that there is none.",
  };
}

}  // namespace millipede
