"""The benchmarks' own tests (`make bench-test`), apart from the product's suite under tests/."""
