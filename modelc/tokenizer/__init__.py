"""modelc.tokenizer"""
