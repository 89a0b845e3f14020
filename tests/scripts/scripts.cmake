# scripts (being written)
