module spectral.test/interop

go 1.26.0

require (
	github.com/twmb/franz-go v1.22.2
	github.com/zeebo/xxh3 v1.1.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
