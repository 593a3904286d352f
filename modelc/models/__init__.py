"""modelc.models"""
