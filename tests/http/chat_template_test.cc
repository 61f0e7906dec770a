// Chat templates: exact prompt strings for Llama-3 and ChatML, family detection, bad input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/file_util.h"
#include "http/chat_template.h"
#include "tests/http/fake_job_service.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "  Hi!\n"},
    {"assistant", "Hello."},
    {"user", "What is 2+2?"},
};

TEST(ChatTemplateTest, Llama3ExactText) {
  auto text = FormatChat(ChatFormat::kLlama3, kConversation);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, ChatMlExactText) {
  auto text = FormatChat(ChatFormat::kChatMl, kConversation);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // ChatML keeps the content as it is (no trimming).
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\n  Hi!\n<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMlAddsQwenDefaultSystemMessage) {
  auto text = FormatChat(ChatFormat::kChatMl, {{"user", "Hi"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, BadMessagesAreClearErrors) {
  auto empty = FormatChat(ChatFormat::kLlama3, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  auto role = FormatChat(ChatFormat::kChatMl, {{"user", "a"}, {"tool", "b"}});
  ASSERT_FALSE(role.ok());
  EXPECT_EQ(role.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(role.status().message().find("messages[1].role"), std::string::npos);
  EXPECT_NE(role.status().message().find("tool"), std::string::npos);
}

TEST(ChatTemplateTest, FormatFromConfigurationOrSpecialTokens) {
  auto llama = http_test::MakeTestTokenizer(
      {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  auto chatml = http_test::MakeTestTokenizer({"<|im_start|>", "<|im_end|>", "<|endoftext|>"});
  auto plain = http_test::MakeTestTokenizer({"<|bos|>", "<|eos|>"});
  ASSERT_TRUE(llama && chatml && plain);

  EXPECT_EQ(*ResolveChatFormat("", *llama), ChatFormat::kLlama3);
  EXPECT_EQ(*ResolveChatFormat("", *chatml), ChatFormat::kChatMl);
  // Configuration wins over detection.
  EXPECT_EQ(*ResolveChatFormat("chatml", *llama), ChatFormat::kChatMl);
  EXPECT_EQ(*ResolveChatFormat("llama3", *plain), ChatFormat::kLlama3);

  auto unknown = ResolveChatFormat("", *plain);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("Llama-3"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("ChatML"), std::string::npos);
  auto misconfigured = ResolveChatFormat("vicuna", *llama);
  ASSERT_FALSE(misconfigured.ok());
  EXPECT_NE(misconfigured.status().message().find("vicuna"), std::string::npos);
}

// The real Llama-3 and Qwen2 tokenizers are recognised, and the template's special tokens
// encode to single ids.
TEST(ChatTemplateTest, RealTokenizersAreRecognised) {
  const std::string dir = std::string(MILLIPEDE_TESTDATA_DIR) + "/tokenizers";
  for (auto [name, format] :
       {std::pair{"llama3", ChatFormat::kLlama3}, std::pair{"qwen2", ChatFormat::kChatMl}}) {
    const std::string path = dir + "/" + name + "/tokenizer.json";
    if (!FileExists(path)) GTEST_SKIP() << "reference tokenizer not found at " << path;
    auto tokenizer = Tokenizer::FromFile(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    auto resolved = ResolveChatFormat("", **tokenizer);
    ASSERT_TRUE(resolved.ok()) << name;
    EXPECT_EQ(*resolved, format) << name;
    auto text = FormatChat(format, {{"user", "Hi"}});
    ASSERT_TRUE(text.ok());
    auto ids = (*tokenizer)->Encode(*text);
    ASSERT_TRUE(ids.ok());
    auto end_of_turn = (*tokenizer)->TokenToId(ChatEndOfTurn(format));
    ASSERT_TRUE(end_of_turn.has_value()) << name;
    int specials = 0;
    for (int32_t id : *ids) specials += (*tokenizer)->IsSpecial(id);
    // Llama-3: begin_of_text + 2 x (start, end header) + eot; ChatML: 3 x start + 2 x end.
    EXPECT_EQ(specials, format == ChatFormat::kLlama3 ? 6 : 5) << name;
  }
}

}  // namespace
}  // namespace millipede
