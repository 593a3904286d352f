"""modelc.formats"""
