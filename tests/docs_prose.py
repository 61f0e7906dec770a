"""Real English prose every checkout has: this repository's README.md and docs/*.md as plain
paragraphs (code blocks, tables, headings and images dropped). The GPU check and the CPU
benchmark of the trained model build their prompts from it."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prose():
    names = ["README.md"] + sorted(
        os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
    paragraphs = []
    for name in names:
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for para in text.split("\n\n"):
            lines = [l for l in para.splitlines() if not l.lstrip().startswith(("|", "#", "!["))]
            para = " ".join(l.strip() for l in lines).strip()
            if len(para) > 80:
                paragraphs.append(para)
    return "\n\n".join(paragraphs)
