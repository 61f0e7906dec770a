// tokenizer_train_demo OUT_JSON: writes a tokenizer.json trained by TrainByteLevelBpe on a small
// fixed corpus, for differential_fuzz.py to compare against Hugging Face `tokenizers`.
#include <cstdio>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tokenizer/bpe_trainer.h"

namespace {

const char* const kCorpus[] = {
    "The quick brown fox jumps over the lazy dog. It's 2024, and we'll see what they've done.",
    "Tokenizers split text into pieces; byte-level BPE never meets an unknown character.",
    "def encode(text):\n    return [ord(c) for c in text]  # 42 items\n\n",
    "for (int i = 0; i < 1000; ++i) { total += values[i] * 3.14159; }\n",
    "Numbers: 1 12 123 1234 12345 3.5 -7 1e9 0x1F; dates 2024-05-03, 13:45:00.",
    "Bonjour, ça va ? Très bien, merci. Übermäßig schöne Grüße aus Köln!",
    "Привет, как дела? Всё хорошо. Съешь же ещё этих мягких французских булок.",
    "日本語のテキストも少し入れておきます。東京は大きな都市です。",
    "中文文本：我们今天学习分词器。模型需要理解多种语言。",
    "한국어 문장도 있습니다. 안녕하세요, 반갑습니다!",
    "مرحبا بالعالم، هذا نص عربي قصير.",
    "नमस्ते दुनिया, यह एक छोटा हिंदी वाक्य है।",
    "Emoji time: 😀 🎉 👍🏽 👨‍👩‍👧 ❤️ ✨ — and some symbols: © ® ™ € £ ¥ § ¶ • … "
    "«quotes»",
    "   leading spaces, trailing spaces   \n\n\tTabs\tand\r\nCRLF line ends\r\n",
    "<|bos|> special tokens are not in the training text normally <|eos|>",
    "URLs like https://example.com/path?query=1&x=y#frag and emails like a.b@c.org",
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tokenizer_train_demo OUT_JSON\n");
    return 2;
  }
  std::vector<std::string> corpus;
  // Repeating the corpus makes pair counts large enough to learn multi-byte merges.
  for (int round = 0; round < 3; ++round) {
    for (const char* line : kCorpus) corpus.emplace_back(line);
  }
  auto json = millipede::TrainByteLevelBpe(corpus, 600, {"<|bos|>", "<|eos|>", "<|pad|>"});
  if (!json.ok()) {
    std::fprintf(stderr, "tokenizer_train_demo: %s\n", json.status().ToString().c_str());
    return 1;
  }
  millipede::Status written = millipede::WriteStringToFile(argv[1], *json);
  if (!written.ok()) {
    std::fprintf(stderr, "tokenizer_train_demo: %s\n", written.ToString().c_str());
    return 1;
  }
  return 0;
}
