#!/usr/bin/python3
"""Make an English text corpus from the prose of two Debian documentation packages.

    apt-get download debian-handbook python3.11-doc
    /usr/bin/python3 models/reference/make_text_corpus.py --out out/text/corpus \
        --deb debian-handbook_11.20220922_all.deb --deb python3.11-doc_3.11.2-6+deb12u9_all.deb
        [--held-out-every 20]

debian-handbook is The Debian Administrator's Handbook (Raphaël Hertzog and Roland Mas;
GPL-2.0+ or CC-BY-SA-3.0), python3.11-doc the Python 3.11 documentation (PSF License
Version 2); their /usr/share/doc/PKG/copyright says so. This reads the English HTML
pages (SOURCES) straight out of each .deb (an ar archive holding data.tar.xz; no dpkg
needed) and keeps the prose: the text of the paragraphs (<p>, <div class="para">) and
list items, with the markup dropped, whitespace collapsed, and code listings (<pre>),
navigation, tables of contents, signatures and indexes left out; paragraphs shorter
than 40 characters and repeats are dropped. One paragraph per line, packages in the
order given, pages in file-name order, so the output is the same for the same .debs.
Paragraph i (counted over all packages) goes to the held-out split iff
i % held_out_every == held_out_every - 1 (5% by default, spread over everything).
Writes DIR/train.txt, DIR/test.txt and DIR/source.json (packages, versions, sha256,
paragraph and byte counts).
"""

import argparse
import hashlib
import html.parser
import io
import json
import lzma
import os
import re
import tarfile

# package → the folder of its English HTML pages; pages under a folder starting with "_"
# (Sphinx's sources and assets) and the general indexes are skipped.
SOURCES = {"debian-handbook": "./usr/share/doc/debian-handbook/html/en-US/",
           "python3.11-doc": "./usr/share/doc/python3.11/html/"}


def is_page(name: str, prefix: str) -> bool:
    rest = name[len(prefix):]
    return name.endswith(".html") and "genindex" not in rest and not any(
        part.startswith("_") for part in rest.split("/")[:-1])


def read_ar(data: bytes) -> dict:
    """Members of an ar archive (a .deb) → {name: bytes}."""
    if data[:8] != b"!<arch>\n":
        raise ValueError("not an ar archive (.deb)")
    out, at = {}, 8
    while at + 60 <= len(data):
        header = data[at:at + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        out[name] = data[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
    return out


def deb_pages(path: str):
    """(control fields, {path inside the package: bytes} of its SOURCES pages) of a .deb."""
    with open(path, "rb") as f:
        members = read_ar(f.read())
    control = next(v for k, v in members.items() if k.startswith("control.tar"))
    fields = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(control) if control[:6] == b"\xfd7zXZ\x00"
                                         else control)) as tar:
        text = tar.extractfile("./control").read().decode()
    for line in text.splitlines():
        if ":" in line and not line.startswith(" "):
            k, v = line.split(":", 1)
            fields[k] = v.strip()
    prefix = SOURCES.get(fields.get("Package"))
    if prefix is None:
        raise ValueError(f"{path}: package {fields.get('Package')!r} is not one of {sorted(SOURCES)}")
    if "data.tar.xz" not in members:
        raise ValueError(f"{path}: expected data.tar.xz in the .deb")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(members["data.tar.xz"]))) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith(prefix) and is_page(m.name, prefix):
                files[m.name] = tar.extractfile(m).read()
    return fields, files


# Navigation, tables of contents, indexes and code: not prose.
SKIPPED_CLASSES = {"docnav", "index", "toc", "sphinxsidebar", "related", "footer", "toctree-wrapper",
                   "contents", "highlight", "sig", "title"}


class Paragraphs(html.parser.HTMLParser):
    """The text of each outermost <div class="para">, <p> or <li>, without <pre> contents
    and the SKIPPED_CLASSES."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs, self.depth, self.pre, self.skip = [], 0, 0, 0
        self.stack, self.text = [], []

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "") or ""
        if tag in ("br", "img", "meta", "link", "hr", "input"):
            return
        classes = set(cls.split())
        opens = (tag == "div" and "para" in classes) or tag in ("p", "li")
        skips = tag in ("pre", "script", "style") or bool(classes & SKIPPED_CLASSES)
        self.stack.append((tag, opens, skips))
        if skips:
            self.skip += 1
        if opens:
            if self.depth == 0:
                self.text = []
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in ("br", "img", "meta", "link", "hr", "input"):
            return
        while self.stack:
            t, opens, skips = self.stack.pop()
            if skips:
                self.skip -= 1
            if opens:
                self.depth -= 1
                if self.depth == 0:
                    self.flush()
            if t == tag:
                break

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.text.append(data)

    def flush(self):
        text = re.sub(r"\s+", " ", "".join(self.text)).strip()
        if len(text) >= 40 and not text.startswith(("http://", "https://")):
            self.paragraphs.append(text)
        self.text = []


def paragraphs(pages: dict) -> list:
    """The paragraphs of the pages, in page-name order."""
    out = []
    for name in sorted(pages):
        p = Paragraphs()
        p.feed(pages[name].decode("utf-8"))
        p.close()
        out += p.paragraphs
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deb", action="append", required=True,
                   help=f"a .deb of one of {sorted(SOURCES)} (apt-get download PKG); repeat for several")
    p.add_argument("--out", required=True)
    p.add_argument("--held-out-every", type=int, default=20)
    args = p.parse_args()
    paras, packages = [], []
    for deb in args.deb:
        with open(deb, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        try:
            fields, pages = deb_pages(deb)
        except (OSError, ValueError) as e:
            p.error(str(e))
        found = paragraphs(pages)
        packages.append({"package": fields["Package"], "version": fields["Version"], "deb_sha256": sha,
                         "pages": len(pages), "paragraphs": len(found)})
        paras += found
    # the same paragraph in several places (notices, repeated sentences) once, at its first place
    seen, unique = set(), []
    for t in paras:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    k = args.held_out_every
    train = [t for i, t in enumerate(unique) if i % k != k - 1]
    test = [t for i, t in enumerate(unique) if i % k == k - 1]
    os.makedirs(args.out, exist_ok=True)
    for name, part in (("train", train), ("test", test)):
        with open(os.path.join(args.out, name + ".txt"), "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in part))
    source = {"packages": packages, "paragraphs": len(unique), "held_out_every": k,
              "train_paragraphs": len(train), "test_paragraphs": len(test),
              "train_bytes": sum(len(t.encode()) + 1 for t in train),
              "test_bytes": sum(len(t.encode()) + 1 for t in test)}
    with open(os.path.join(args.out, "source.json"), "w") as f:
        json.dump(source, f, indent=2)
    print(json.dumps(source))


if __name__ == "__main__":
    main()
