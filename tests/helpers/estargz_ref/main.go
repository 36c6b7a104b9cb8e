// SPDX-License-Identifier: Apache-2.0
// estargz_ref — the reference eStargz implementation (containerd's
// stargz-snapshotter estargz package, Debian's
// golang-github-containerd-stargz-snapshotter-dev) as a test helper:
//
//	estargz_ref write IN.tar OUT CHUNK_SIZE [PRIORITIZED,...]
//	    writes IN.tar as an eStargz blob (gzip); prints the TOC's digest
//	    and the diff_id
//	estargz_ref verify BLOB TOC_DIGEST
//	    opens BLOB, checks its TOC against TOC_DIGEST and every chunk of
//	    every regular file against its digest
//
// Built by tests/e2e/test_estargz_interop.sh with the packaged sources (GOPATH
// /usr/share/gocode, no network).
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "estargz_ref:", err)
	os.Exit(1)
}

func section(path string) (*os.File, *io.SectionReader) {
	f, err := os.Open(path)
	if err != nil {
		fail(err)
	}
	st, err := f.Stat()
	if err != nil {
		fail(err)
	}
	return f, io.NewSectionReader(f, 0, st.Size())
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: estargz_ref write IN.tar OUT CHUNK [PRIO,...] | verify BLOB TOCDIGEST")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "write":
		f, sr := section(os.Args[2])
		defer f.Close()
		chunk, err := strconv.Atoi(os.Args[4])
		if err != nil {
			fail(err)
		}
		opts := []estargz.Option{estargz.WithChunkSize(chunk)}
		if len(os.Args) > 5 && os.Args[5] != "" {
			opts = append(opts, estargz.WithPrioritizedFiles(strings.Split(os.Args[5], ",")))
		}
		blob, err := estargz.Build(sr, opts...)
		if err != nil {
			fail(err)
		}
		defer blob.Close()
		out, err := os.Create(os.Args[3])
		if err != nil {
			fail(err)
		}
		if _, err := io.Copy(out, blob); err != nil {
			fail(err)
		}
		if err := out.Close(); err != nil {
			fail(err)
		}
		fmt.Printf("%s %s\n", blob.TOCDigest(), blob.DiffID())
	case "verify":
		f, sr := section(os.Args[2])
		defer f.Close()
		r, err := estargz.Open(sr)
		if err != nil {
			fail(err)
		}
		d, err := digest.Parse(os.Args[3])
		if err != nil {
			fail(err)
		}
		if _, err := r.VerifyTOC(d); err != nil {
			fail(err)
		}
		root, ok := r.Lookup("")
		if !ok {
			fail(fmt.Errorf("no root"))
		}
		n := 0
		var walk func(dir string, e *estargz.TOCEntry)
		walk = func(dir string, e *estargz.TOCEntry) {
			e.ForeachChild(func(base string, c *estargz.TOCEntry) bool {
				name := strings.TrimPrefix(dir+"/"+base, "/")
				if c.Type == "dir" {
					walk(name, c)
				} else if c.Type == "reg" {
					ra, err := r.OpenFile(name)
					if err != nil {
						fail(err)
					}
					h := digest.SHA256.Digester()
					if _, err := io.Copy(h.Hash(), io.NewSectionReader(ra, 0, c.Size)); err != nil {
						fail(err)
					}
					if c.Size > 0 && h.Digest().String() != c.Digest {
						fail(fmt.Errorf("%s: content %s, TOC says %s", name, h.Digest(), c.Digest))
					}
					n++
				}
				return true
			})
		}
		walk("", root)
		fmt.Printf("ok %d files\n", n)
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
