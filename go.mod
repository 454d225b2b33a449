module github.com/aiforge/aiforge

go 1.26.8
