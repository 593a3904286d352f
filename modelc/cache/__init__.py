"""modelc.cache"""
