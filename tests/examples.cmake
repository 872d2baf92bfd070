# Example programs run end to end in short configurations (owned by the examples).
